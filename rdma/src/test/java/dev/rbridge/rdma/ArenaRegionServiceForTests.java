package dev.rbridge.rdma;

import dev.rbridge.rdma.RemoteMemoryException.Status;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.SocketAddress;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A {@link RegionService} for the rdma module's own tests, which cannot run the memserver (it depends on this module):
 * what a transport needs of a memserver, done plainly. Regions are shared-arena memory (freed by the garbage collector,
 * so a pin can never outlive its memory) with ids, keys and ranges checked as the memserver checks them; sessions have
 * names and counters; refusals are counted by reason; a volume's lease belongs to one session at a time and passes on
 * once given back or once its session ended (a takeover then). Not the memserver: no capacity, no lease ttls or key
 * rotation, no written-page tracking (everything reads as written), and ZERO fills.
 */
public final class ArenaRegionServiceForTests implements RegionService {
    private final String token;
    private final SecureRandom random = new SecureRandom();
    private final AtomicLong regionIds = new AtomicLong(1);
    private final AtomicLong sessionIds = new AtomicLong(1);
    private final Map<Long, TestRegion> regions = new ConcurrentHashMap<>();
    private final Map<Long, TestSession> sessions = new ConcurrentHashMap<>();
    private final Map<String, AtomicLong> refused = new ConcurrentHashMap<>();
    /** By volume; guarded by itself. */
    private final Map<String, VolumeLease> leases = new TreeMap<>();

    private record TestRegion(RegionDescriptor descriptor, MemorySegment memory, long ownerId, String owner) {
    }

    private record VolumeLease(TestSession holder, boolean givenBack) {
    }

    /** A session as a test sees it: who, its transport's counters, how many regions it allocated. */
    public record SessionView(long id, String name, ConnectionStats.Snapshot stats, int regions) {
    }

    public ArenaRegionServiceForTests(String token) {
        this.token = token;
    }

    @Override
    public byte[] proveToken(byte[] transcript) {
        return dev.rbridge.rdma.TokenProof.server(token, transcript);
    }

    @Override
    public Session open(Credential presented, String clientName, SocketAddress peer) throws RemoteMemoryException {
        if (!presented.matches(token)) {
            refused("token", peer);
            throw new RemoteMemoryException(Status.AUTH_FAILED, "wrong token");
        }
        TestSession s = new TestSession(sessionIds.getAndIncrement(), clientName);
        sessions.put(s.id, s);
        return s;
    }

    @Override
    public void refused(String reason, SocketAddress peer) {
        refused.computeIfAbsent(reason, k -> new AtomicLong()).incrementAndGet();
    }

    /** Peers turned away so far, by reason. */
    public Map<String, Long> refused() {
        Map<String, Long> out = new TreeMap<>();
        refused.forEach((k, v) -> out.put(k, v.get()));
        return out;
    }

    /** The sessions open now, oldest first. */
    public List<SessionView> sessions() {
        List<SessionView> out = new ArrayList<>();
        for (TestSession s : sessions.values()) {
            int n = (int) regions.values().stream().filter(r -> r.ownerId() == s.id).count();
            ConnectionStats st = s.stats;
            out.add(new SessionView(s.id, s.name, (st == null ? new ConnectionStats() : st).snapshot(), n));
        }
        out.sort(Comparator.comparingLong(SessionView::id));
        return out;
    }

    /** Cuts a session's connection, as an operator's disconnect; false when there is no such session. */
    public boolean disconnect(long sessionId) {
        TestSession s = sessions.get(sessionId);
        if (s == null || s.disconnect == null) {
            return false;
        }
        s.disconnect.run();
        return true;
    }

    private TestRegion checked(long id, long key) throws RemoteMemoryException {
        TestRegion r = regions.get(id);
        if (r == null) {
            throw new RemoteMemoryException(Status.NO_SUCH_REGION, "no region " + id);
        }
        if (r.descriptor().key() != key) {
            throw new RemoteMemoryException(Status.ACCESS_DENIED, "wrong access key for region " + id);
        }
        return r;
    }

    private static void checkRange(TestRegion r, long offset, long length) throws RemoteMemoryException {
        if (offset < 0 || length < 0 || offset > r.descriptor().length() - length) {
            throw new RemoteMemoryException(Status.OUT_OF_RANGE, "range " + offset + "+" + length
                    + " is outside region " + r.descriptor().id());
        }
    }

    private final class TestSession implements Session {
        final long id;
        final String name;
        volatile ConnectionStats stats;
        volatile Runnable disconnect;
        volatile boolean ended;

        TestSession(long id, String name) {
            this.id = id;
            this.name = name;
        }

        public ServerInfo serverInfo() {
            return new ServerInfo("arena-for-tests", 1, Long.MAX_VALUE, Long.MAX_VALUE);
        }

        public RegionDescriptor allocate(RegionTag tag, long length) throws RemoteMemoryException {
            if (length <= 0) {
                throw new RemoteMemoryException(Status.BAD_REQUEST, "region length must be positive: " + length);
            }
            long key;
            do {
                key = random.nextLong();
            } while (key == 0);
            RegionDescriptor d = new RegionDescriptor(regionIds.getAndIncrement(), length, key, tag);
            regions.put(d.id(), new TestRegion(d, Arena.ofAuto().allocate(length, 4096), id, name));
            return d;
        }

        public RegionDescriptor open(long regionId) throws RemoteMemoryException {
            TestRegion r = regions.get(regionId);
            if (r == null) {
                throw new RemoteMemoryException(Status.NO_SUCH_REGION, "no region " + regionId);
            }
            return r.descriptor();
        }

        public List<RegionInfo> list() {
            List<RegionInfo> out = new ArrayList<>();
            for (TestRegion r : regions.values()) {
                RegionDescriptor d = r.descriptor();
                out.add(new RegionInfo(new RegionDescriptor(d.id(), d.length(), 0, d.tag()), r.owner()));
            }
            out.sort(Comparator.comparingLong(i -> i.descriptor().id()));
            return out;
        }

        public Listing listing() {
            List<RegionInfo> listed = list();
            return new Listing() {
                public List<RegionInfo> regions() {
                    return listed;
                }

                public void close() {}
            };
        }

        public void release(long regionId, long key) throws RemoteMemoryException {
            checked(regionId, key);
            regions.remove(regionId);
        }

        public RegionDescriptor retag(long regionId, long key, RegionTag tag) throws RemoteMemoryException {
            TestRegion r = checked(regionId, key);
            RegionDescriptor d = r.descriptor();
            RegionDescriptor retagged = new RegionDescriptor(d.id(), d.length(), d.key(), tag);
            regions.put(regionId, new TestRegion(retagged, r.memory(), r.ownerId(), r.owner()));
            return retagged;
        }

        public Lease lease(String volume, String owner, long ttlMillis) throws RemoteMemoryException {
            synchronized (leases) {
                VolumeLease previous = leases.get(volume);
                if (previous != null && previous.holder() != this && !previous.givenBack()
                        && !previous.holder().ended) {
                    throw new RemoteMemoryException(Status.LEASE_HELD, "volume '" + volume + "' is leased by "
                            + "another client");
                }
                leases.put(volume, new VolumeLease(this, false));
                boolean tookOver = previous != null && previous.holder() != this && !previous.givenBack();
                return new Lease(volume, owner, ttlMillis, tookOver);
            }
        }

        public void unlease(String volume, String owner) {
            synchronized (leases) {
                VolumeLease l = leases.get(volume);
                if (l != null && l.holder() == this) {
                    leases.put(volume, new VolumeLease(this, true));
                }
            }
        }

        public Pin pin(long regionId, long key, long offset, long length) throws RemoteMemoryException {
            TestRegion r = checked(regionId, key);
            checkRange(r, offset, length);
            MemorySegment slice = r.memory().asSlice(offset, length);
            return new Pin() {
                public MemorySegment memory() {
                    return slice;
                }

                public void close() {}
            };
        }

        public void zero(long regionId, long key, long offset, long length) throws RemoteMemoryException {
            TestRegion r = checked(regionId, key);
            checkRange(r, offset, length);
            r.memory().asSlice(offset, length).fill((byte) 0);
        }

        public void attach(ConnectionStats stats, Runnable disconnect) {
            this.stats = stats;
            this.disconnect = disconnect;
        }

        public void closed() {
            ended = true;
            sessions.remove(id);
        }
    }
}
