package dev.rbridge.memserver;

import dev.rbridge.memory.AnonymousMemory;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The {@link Memserver}'s regions by id, and what they hold of its capacity and its region limit: a region's whole
 * pages are reserved before its memory is mapped, so the limits hold under races, and stay reserved until its memory
 * is really unmapped; a region released or revoked whose memory a pin still holds is {@linkplain #lingering()
 * lingering} until then. The table itself is safe to read and change from any thread; what must be one step with a
 * lease check is the caller's to lock.
 */
final class RegionTable {
    private static final Logger log = LoggerFactory.getLogger(Memserver.class);

    private final MemserverConfig config;
    private final Map<Long, Region> regions = new ConcurrentHashMap<>();
    /** Regions released or revoked whose memory a pin still holds: counted against the capacity until unmapped. */
    private final Set<Region> lingering = ConcurrentHashMap.newKeySet();
    private final AtomicLong granted = new AtomicLong();
    private final AtomicLong nextRegionId = new AtomicLong(1);
    /** Regions granted or being granted: reserved before the memory is mapped, so the limit holds under races. */
    private final AtomicInteger regionSlots = new AtomicInteger();
    private final SecureRandom random = new SecureRandom();

    RegionTable(MemserverConfig config) {
        this.config = config;
    }

    /**
     * Reserves the whole pages of a region of {@code length} (at most the capacity) and a place under the region limit,
     * or says why not; returns what was reserved, for {@link #unreserve}.
     */
    long reserve(long length) throws RemoteMemoryException {
        long rounded = rounded(length);
        long before;
        do {
            before = granted.get();
            if (rounded > config.capacityBytes() - before) {
                throw new RemoteMemoryException(Status.NO_CAPACITY, "cannot grant " + length + " bytes ("
                        + rounded + " in whole pages): " + (config.capacityBytes() - before) + " of the capacity of "
                        + config.capacityBytes() + " bytes are free");
            }
        } while (!granted.compareAndSet(before, before + rounded));
        if (regionSlots.incrementAndGet() > config.maxRegions()) {
            unreserve(rounded);
            throw new RemoteMemoryException(Status.NO_CAPACITY, "cannot grant another region: this memserver holds "
                    + "its limit of " + config.maxRegions() + " regions (--max-regions)");
        }
        return rounded;
    }

    /** Gives back what {@link #reserve} reserved for a region that was not made. */
    void unreserve(long rounded) {
        regionSlots.decrementAndGet();
        granted.addAndGet(-rounded);
    }

    /** Maps the memory of a region {@link #reserve reserved} for; when the system refuses, gives the place back. */
    AnonymousMemory map(long length, long rounded) throws RemoteMemoryException {
        try {
            return AnonymousMemory.map(length, config.hugePages(), config.mlock(), config.numaNode());
        } catch (RuntimeException e) {
            unreserve(rounded);
            log.warn("could not grant {} bytes ({} in whole pages): {}", length, rounded, e.getMessage());
            throw new RemoteMemoryException(Status.NO_CAPACITY, "the memserver's system refused " + length
                    + " bytes: " + e.getMessage());
        }
    }

    /** A new region's descriptor: the next id, a random access key other than 0. */
    RegionDescriptor newDescriptor(long length, RegionTag tag) {
        long key;
        do {
            key = random.nextLong();
        } while (key == 0);
        return new RegionDescriptor(nextRegionId.getAndIncrement(), length, key, tag);
    }

    /** Adds a region over {@code memory}, which counts against the capacity until it is unmapped. */
    Region add(RegionDescriptor d, AnonymousMemory memory, String owner, long ownerId, boolean scratch) {
        Region region = new Region(d, memory, owner, ownerId, scratch, this::unmapped);
        regions.put(d.id(), region);
        return region;
    }

    /** What a region of this length costs against the capacity: whole pages of the kind configured. */
    private long rounded(long length) {
        long page = config.hugePages() ? AnonymousMemory.HUGE_PAGE_SIZE : AnonymousMemory.PAGE_SIZE;
        return (length + page - 1) & -page; // no overflow: length is at most the capacity, at most 2^62
    }

    /** The region, or null. */
    Region get(long id) {
        return regions.get(id);
    }

    /** The region if {@code key} is its access key; else why not. */
    Region checked(long id, long key) throws RemoteMemoryException {
        Region r = regions.get(id);
        if (r == null) {
            throw new RemoteMemoryException(Status.NO_SUCH_REGION, "no region " + id);
        }
        if (r.descriptor.key() != key) {
            throw new RemoteMemoryException(Status.ACCESS_DENIED, "wrong access key for region " + id);
        }
        return r;
    }

    /** Takes {@code r} out of the table (to be {@linkplain #released released} next); false if it was not there. */
    boolean remove(long id, Region r) {
        return regions.remove(id, r);
    }

    /** Takes the region out of the table and releases it: the region if this was its release, else null. */
    Region revoke(long id) {
        Region r = regions.remove(id);
        return r != null && released(r) ? r : null;
    }

    /**
     * Drops a region taken out of the table: it counts against the capacity and the region limit until its memory is
     * really unmapped, when its last pin ends ({@link #unmapped}); meanwhile it is {@linkplain #lingering lingering}.
     * True the first time.
     */
    boolean released(Region r) {
        lingering.add(r); // before the release, whose unmapping (at once when nothing pins it) takes it out again
        boolean first = r.release();
        if (r.unmapped()) {
            lingering.remove(r); // released before, and unmapped since
        }
        return first;
    }

    /** A region's memory was unmapped: what it granted is free again. */
    private void unmapped(Region r) {
        lingering.remove(r);
        granted.addAndGet(-rounded(r.descriptor.length()));
        regionSlots.decrementAndGet();
    }

    /**
     * Takes out and releases the scratch regions of the client {@code ownerId} (those it allocated without holding
     * their volume's lease); returns those released now.
     */
    List<Region> removeScratch(long ownerId) {
        List<Region> gone = new ArrayList<>();
        for (Region r : regions.values()) {
            if (r.scratch && r.ownerId == ownerId && regions.remove(r.descriptor.id(), r) && released(r)) {
                gone.add(r);
            }
        }
        return gone;
    }

    /** Every region, keys withheld (0), by id. */
    List<RegionInfo> infos() {
        List<RegionInfo> out = new ArrayList<>(regions.size());
        for (Region r : regions.values()) {
            RegionDescriptor d = r.descriptor;
            out.add(new RegionInfo(new RegionDescriptor(d.id(), d.length(), 0, d.tag()), r.owner));
        }
        out.sort(Comparator.comparingLong(i -> i.descriptor().id()));
        return out;
    }

    /** The volumes that have regions. */
    Set<String> volumes() {
        Set<String> volumes = new HashSet<>();
        for (Region r : regions.values()) {
            volumes.add(r.descriptor.tag().volume());
        }
        return volumes;
    }

    /** New random keys for every region of a volume; how many. The caller makes it one step with its lease check. */
    int rotateKeys(String volume) {
        int n = 0;
        for (Region r : regions.values()) {
            RegionDescriptor d = r.descriptor;
            if (d.tag().volume().equals(volume)) {
                long key;
                do {
                    key = random.nextLong();
                } while (key == 0 || key == d.key());
                r.descriptor = new RegionDescriptor(d.id(), d.length(), key, d.tag());
                n++;
            }
        }
        return n;
    }

    /** The regions in the table now. */
    Collection<Region> all() {
        return regions.values();
    }

    /** The ids of the regions in the table now, a copy. */
    List<Long> ids() {
        return List.copyOf(regions.keySet());
    }

    /** Regions in the table. */
    int size() {
        return regions.size();
    }

    /** Bytes granted: whole pages of the regions in the table and of the lingering ones. */
    long grantedBytes() {
        return granted.get();
    }

    /** Regions released or revoked whose memory a pin still holds. */
    Set<Region> lingering() {
        return lingering;
    }
}
