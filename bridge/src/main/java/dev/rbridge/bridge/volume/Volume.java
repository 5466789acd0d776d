package dev.rbridge.bridge.volume;

import dev.rbridge.common.Failures;
import dev.rbridge.common.splice.Pipe;
import dev.rbridge.nbd.device.BlockDevice;
import dev.rbridge.nbd.device.BlockDeviceException;
import dev.rbridge.nbd.device.Extent;
import dev.rbridge.nbd.protocol.Errno;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;

/**
 * A volume as an NBD block device. Requests are cut at slab boundaries; reads go to one live replica of the slab
 * (spread across them, retried on another if one fails), writes and zeroes go to every live replica and to a replica
 * being rebuilt, and complete when all of them have the data in their memory. A slab never written has no replicas
 * and reads as zeroes without a round trip.
 *
 * <p>FLUSH and FUA need no round trip: a remote write completes only once the bytes are in the memserver's memory,
 * and this device acknowledges a write only after every live replica completed it.
 *
 * <p>A volume whose lease this bridge lost on some memserver (another client took it over, so its keys changed) is
 * <em>fenced</em>: from then on every request fails with EIO, whatever replicas it could still reach, FLUSH and
 * BLOCK_STATUS included. Writing on to those would make two owners of one volume; failing is what the new owner needs
 * from this bridge, and what tells its clients that their writes are not safe here.
 *
 * <p>The data path's two sides have classes of their own, {@link VolumeReads} and {@link VolumeWrites}; this class
 * holds the volume's slabs and state and answers for them.
 */
public final class Volume implements BlockDevice {
    /** Replaced when the volume grows, after {@link #slabs}: whoever sees the new size finds its slabs. */
    volatile VolumeSpec spec;
    final SlabHost host;
    final AllocationManifest manifest;
    /** Replaced when the volume grows (the old slabs kept at their indices). */
    private volatile Slab[] slabs;
    private final int slabShift;
    /** Why this volume is fenced (its lease was lost), or null while it is served. */
    private volatile String fenced;
    /** Set by {@link #lookForDegraded}; true at first, so the health duty's first look walks the slabs. */
    private final AtomicBoolean degradedLookWanted = new AtomicBoolean(true);
    /** What small reads take here: the hedge delay ({@link ReadHedger}). */
    final ReadLatency readLatency = new ReadLatency();
    /** Second attempts sent by hedged reads, and those that answered first. */
    final LongAdder readHedges = new LongAdder();
    final LongAdder readHedgesWon = new LongAdder();
    /** The read side of the data path. */
    final VolumeReads reads = new VolumeReads(this);
    /** The write side of the data path (writes, zeroes, trims), and its count of ENOSPC failures. */
    private final VolumeWrites writes = new VolumeWrites(this);
    /** Which replicas are where, for the bridge as memservers come and go. */
    private final ReplicaRoster roster = new ReplicaRoster(this);

    public Volume(VolumeSpec spec, SlabHost host) {
        this.spec = spec;
        this.host = host;
        this.slabShift = Long.numberOfTrailingZeros(spec.slabSize());
        this.slabs = new Slab[spec.slabCount()];
        this.manifest = new AllocationManifest(spec.name(), slabs.length);
        for (int i = 0; i < slabs.length; i++) {
            long start = (long) i << slabShift;
            slabs[i] = new Slab(this, i, start, Math.min(spec.slabSize(), spec.size() - start));
        }
    }

    public String name() {
        return spec.name();
    }

    /**
     * Grows the volume while it serves: new slabs past the old end, unallocated until written (like every slab of a new
     * volume). NBD connections made from now on see the new size; connections already open keep the size they were
     * given. Refused with a sentence: IllegalArgumentException when no volume can grow to {@code newSize} while serving
     * (not a size this volume can have, or more slabs than its allocation manifest holds), IllegalStateException when
     * this volume cannot grow now (the size is not larger, or the old end cuts a slab: its regions have that slab's old
     * length). Every bound is checked, in long arithmetic, before anything is allocated.
     */
    public synchronized void grow(long newSize) {
        VolumeSpec old = spec;
        if (newSize <= old.size()) {
            throw new IllegalStateException("volume " + old.name() + " is " + old.size() + " bytes; "
                    + (newSize == old.size() ? "it already has that size"
                            : "shrinking needs a restart with"
                                    + " --allow-shrink, which discards what lies past the new end"));
        }
        if (old.size() % old.slabSize() != 0) {
            throw new IllegalStateException("volume " + old.name() + " ends inside a slab (size " + old.size()
                    + " is not a multiple of its slab size " + old.slabSize() + "), and that slab's regions have its"
                    + " shorter length: it cannot grow");
        }
        VolumeSpec grown = new VolumeSpec(old.name(), newSize, old.slabSize(), old.replicas(), old.readOnly(),
                old.minimumBlockSize(), old.description()); // refuses a size of more slabs than an int counts
        if (!manifest.growTo(grown.slabCount())) {
            throw new IllegalArgumentException("volume " + old.name() + " would have " + grown.slabCount() + " slabs,"
                    + " more than its allocation manifest holds while serving; restart the bridge with the new size");
        }
        Slab[] now = slabs;
        Slab[] more = java.util.Arrays.copyOf(now, grown.slabCount());
        for (int i = now.length; i < more.length; i++) {
            long start = (long) i << slabShift;
            more[i] = new Slab(this, i, start, Math.min(grown.slabSize(), newSize - start));
        }
        slabs = more;
        spec = grown;
    }

    public VolumeSpec spec() {
        return spec;
    }

    public int replicas() {
        return spec.replicas();
    }

    public AllocationManifest manifest() {
        return manifest;
    }

    public Slab slab(int index) {
        return slabs[index];
    }

    public int slabCount() {
        return slabs.length;
    }

    @Override
    public long size() {
        return spec.size();
    }

    /**
     * Stops serving this volume for good ({@code reason}: which lease was lost where); true the first time. Every
     * request from now on fails with EIO and no rebuild touches it.
     */
    public boolean fence(String reason) {
        synchronized (this) {
            if (fenced != null) {
                return false;
            }
            fenced = reason;
            return true;
        }
    }

    /** Why this volume is fenced, or null while it is served. */
    public String fenced() {
        return fenced;
    }

    /** Requests failed with ENOSPC because no memserver had room for a slab they needed. */
    public long outOfSpaceFailures() {
        return writes.outOfSpaceFailures();
    }

    /** Reads sent to a second replica because the first had not answered within the hedge delay. */
    public long readHedges() {
        return readHedges.sum();
    }

    /** Hedged reads whose second attempt answered first. */
    public long readHedgesWon() {
        return readHedgesWon.sum();
    }

    /** How long a small read may take here before it is hedged (nanoseconds): the current estimate. */
    public long hedgeDelayNanos() {
        return readLatency.delayNanos();
    }

    /** Whether a request failed with ENOSPC within the last {@code nanos}. */
    public boolean outOfSpaceWithin(long nanos) {
        return writes.outOfSpaceWithin(nanos);
    }

    /** The slabs, in order; replaced as a whole when the volume grows. */
    Slab[] slabs() {
        return slabs;
    }

    /** log2 of the slab size: an offset's slab is {@code offset >>> slabShift()}. */
    int slabShift() {
        return slabShift;
    }

    BlockDeviceException fencedError() {
        return new BlockDeviceException(Errno.EIO, "volume " + spec.name() + " is no longer served by this bridge: "
                + fenced);
    }

    /** Reports a lost lease to the host (which fences this volume) and fails the request with EIO. */
    <T> CompletableFuture<T> failFenced(Replica r, Throwable cause) {
        host.leaseLost(this, r, Failures.reason(cause));
        return CompletableFuture.failedFuture(fenced != null ? fencedError()
                : new BlockDeviceException(Errno.EIO, "volume " + spec.name() + ": " + Failures.reason(cause), cause));
    }

    // ------------------------------------------------------------------------------------------------ data path

    @Override
    public CompletableFuture<Void> read(long offset, ByteBuffer dst) {
        return reads.read(offset, dst);
    }

    @Override
    public boolean splicesReads() {
        return host.splicesReads();
    }

    @Override
    public boolean splicesRead(long offset, int length) {
        return host.splicesReads() && reads.spliceableSlab(offset, length) != null;
    }

    /**
     * A read within one slab from one replica is spliced where the provider can (see
     * {@link dev.rbridge.rdma.RemoteConnection#readSpliced}); everything else (more than one slab, a read that would
     * be hedged, a slab being resynced or never written) reads into {@code dst}. A spliced attempt that fails is
     * handled as a failed read (a lost lease fences, a faulty replica is taken out) and read again into {@code dst}
     * along the usual path: the pipe is then the caller's to drop.
     */
    @Override
    public CompletableFuture<Integer> readSpliced(long offset, ByteBuffer dst, Pipe pipe) {
        return reads.readSpliced(offset, dst, pipe);
    }

    @Override
    public CompletableFuture<Void> write(long offset, ByteBuffer src, boolean fua) {
        return writes.write(offset, src);
    }

    @Override
    public CompletableFuture<Void> flush() {
        // Nothing to wait for (see the class comment), but a fenced volume must not tell a client its writes are
        // durable: the bridge that owns the volume now may have written over them.
        return fenced != null ? CompletableFuture.failedFuture(fencedError()) : CompletableFuture.completedFuture(null);
    }

    @Override
    public CompletableFuture<Void> trim(long offset, long length, boolean fua) {
        return writes.zeroes(offset, length, VolumeWrites.Kind.PUNCH);
    }

    @Override
    public CompletableFuture<Void> writeZeroes(long offset, long length, boolean mayPunchHole, boolean fua) {
        return writes.zeroes(offset, length, mayPunchHole ? VolumeWrites.Kind.PUNCH : VolumeWrites.Kind.ZERO);
    }

    @Override
    public boolean fastZero() {
        return true;
    }

    @Override
    public CompletableFuture<List<Extent>> blockStatus(long offset, long length, int maxExtents) {
        return reads.blockStatus(offset, length, maxExtents);
    }

    @Override
    public void close() {
        // The bridge owns the connections and the regions; a volume has nothing of its own to free.
    }

    // ------------------------------------------------------------------------------------------- state changes

    /** Which of this volume's replicas are where, as memservers come and go (reattach, drains, a memserver down). */
    public ReplicaRoster roster() {
        return roster;
    }

    /**
     * A slab of this volume may have fallen below its replicas (a failure, a rebuild that could not finish): the health
     * duty walks the slabs at its next look.
     */
    public void lookForDegraded() {
        degradedLookWanted.set(true);
    }

    /** Whether {@link #lookForDegraded} was called since the last call (cleared before the caller walks the slabs). */
    public boolean takeLookForDegraded() {
        return degradedLookWanted.getAndSet(false);
    }

    /** Slabs with fewer live replicas than wanted but at least one (a rebuild can help them). */
    public List<Slab> degraded() {
        List<Slab> out = new ArrayList<>();
        if (fenced != null) {
            return out; // nothing to rebuild for a volume this bridge no longer serves
        }
        for (Slab s : slabs) {
            ReplicaSet set = s.set;
            if (set != null && !set.lost() && set.live.size() < spec.replicas() && set.building == null) {
                out.add(s);
            }
        }
        return out;
    }

    // ------------------------------------------------------------------------------------------------- status

    /** One slab as an operator sees it. */
    public record SlabStatus(int index, long start, long length, SlabState state, long generation,
            List<String> replicas,
            String building, long rebuildCopiedBytes) {
    }

    /**
     * The volume as an operator sees it: its {@link VolumeState} and how many of its slabs are in each
     * {@link SlabState} ({@code allocated}: every slab but the unallocated ones).
     */
    public record VolumeStatus(String name, long size, long slabSize, int replicas, VolumeState state, int slabs,
            int allocated, int healthy, int degraded, int rebuilding, int lost) {
        /** How many slabs are in {@code state}. */
        public int count(SlabState state) {
            return switch (state) {
                case UNALLOCATED -> slabs - allocated;
                case HEALTHY -> healthy;
                case DEGRADED -> degraded;
                case REBUILDING -> rebuilding;
                case LOST -> lost;
            };
        }
    }

    public SlabStatus slabStatus(int index) {
        Slab s = slabs[index];
        ReplicaSet set = s.set;
        if (set == null) {
            return new SlabStatus(index, s.start, s.length, SlabState.UNALLOCATED, 0, List.of(), null, 0);
        }
        List<String> rs = new ArrayList<>();
        set.live.forEach(r -> rs.add(r.describe()));
        return new SlabStatus(index, s.start, s.length, state(set), set.generation, rs,
                set.building == null ? null : set.building.describe(),
                set.building == null ? 0 : s.rebuildCopied.get());
    }

    private SlabState state(ReplicaSet set) {
        if (set.lost()) {
            return SlabState.LOST;
        }
        if (set.building != null) {
            return SlabState.REBUILDING;
        }
        return set.live.size() >= spec.replicas() ? SlabState.HEALTHY : SlabState.DEGRADED;
    }

    public VolumeStatus status() {
        int allocated = 0, healthy = 0, degraded = 0, rebuilding = 0, lost = 0;
        for (Slab s : slabs) {
            ReplicaSet set = s.set;
            if (set == null) {
                continue;
            }
            allocated++;
            switch (state(set)) {
                case LOST -> lost++;
                case REBUILDING -> rebuilding++;
                case HEALTHY -> healthy++;
                case DEGRADED -> degraded++;
            }
        }
        VolumeState state = fenced != null ? VolumeState.FENCED
                : lost > 0 ? VolumeState.LOST
                        : rebuilding > 0 ? VolumeState.REBUILDING
                                : degraded > 0 ? VolumeState.DEGRADED : VolumeState.HEALTHY;
        return new VolumeStatus(spec.name(), spec.size(), spec.slabSize(), spec.replicas(), state, slabs.length,
                allocated, healthy, degraded, rebuilding, lost);
    }

    // ------------------------------------------------------------------------------------------------- errors

    BlockDeviceException lostError(Slab s) {
        return new BlockDeviceException(Errno.EIO, "volume " + spec.name() + " slab " + s.index + " (bytes " + s.start
                + "-" + (s.start + s.length - 1) + ") has no live replica");
    }

    BlockDeviceException ioError(Slab s, String op, Throwable cause) {
        if (cause instanceof BlockDeviceException b) {
            return b;
        }
        return new BlockDeviceException(Errno.EIO, op + " on volume " + spec.name() + " slab " + s.index + " failed: "
                + Failures.reason(cause), cause);
    }
}
