package dev.rbridge.rdma.local;

import dev.rbridge.rdma.ConnectionLifecycle;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ServerInfo;

import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;

/** A client connection to a memserver in this JVM: every operation runs on the caller's thread. */
final class LocalConnection extends ConnectionLifecycle {
    /** Never started: only asked whether a buffer is confined to its creating thread. */
    private static final Thread SOME_OTHER_THREAD = Thread.ofPlatform().unstarted(() -> {
    });

    private final RegionService.Session session;
    private final String peer;
    private final Consumer<LocalConnection> onClose;
    private final ConnectionStats stats = new ConnectionStats();

    LocalConnection(RegionService.Session session, InetSocketAddress address, Consumer<LocalConnection> onClose) {
        this(session, address.getHostString() + ":" + address.getPort(), onClose);
    }

    private LocalConnection(RegionService.Session session, String peer, Consumer<LocalConnection> onClose) {
        super("local memserver " + peer);
        this.session = session;
        this.peer = peer;
        this.onClose = onClose;
        session.attach(stats, () -> lost("disconnected by the memserver's operator"));
    }

    private interface Body<T> {
        T run() throws RemoteMemoryException;
    }

    private <T> CompletableFuture<T> call(Body<T> body) {
        CompletableFuture<T> dead = failedIfClosed();
        if (dead != null) {
            return dead;
        }
        try {
            stats.sendMessages.increment();
            T result = body.run();
            stats.recvMessages.increment();
            return CompletableFuture.completedFuture(result);
        } catch (RemoteMemoryException e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    @Override
    public ServerInfo server() {
        return session.serverInfo();
    }

    @Override
    public CompletableFuture<RegionDescriptor> allocate(RegionTag tag, long length) {
        return call(() -> session.allocate(tag, length));
    }

    @Override
    public CompletableFuture<RegionDescriptor> open(long regionId) {
        return call(() -> session.open(regionId));
    }

    @Override
    public CompletableFuture<List<RegionInfo>> list() {
        return call(session::list);
    }

    @Override
    public CompletableFuture<Void> release(RegionDescriptor region) {
        return call(() -> {
            session.release(region.id(), region.key());
            return null;
        });
    }

    @Override
    public CompletableFuture<RegionDescriptor> retag(RegionDescriptor region, RegionTag tag) {
        return call(() -> session.retag(region.id(), region.key(), tag));
    }

    @Override
    public CompletableFuture<Lease> lease(String volume, String owner, Duration ttl) {
        return lease(volume, owner, ttl, Lease.NO_ID);
    }

    @Override
    public CompletableFuture<Lease> lease(String volume, String owner, Duration ttl, long leaseId) {
        long ttlMillis;
        if (ttl.isNegative() || ttl.isZero()) {
            ttlMillis = ttl.isZero() ? 0 : -1;
        } else {
            try {
                ttlMillis = Math.max(1, ttl.toMillis()); // as the tcp provider sends it
            } catch (ArithmeticException e) {
                ttlMillis = Long.MAX_VALUE;
            }
        }
        long millis = ttlMillis;
        return call(() -> session.lease(volume, owner, millis, leaseId));
    }

    @Override
    public CompletableFuture<Void> unlease(String volume, String owner) {
        return unlease(volume, owner, Lease.NO_ID);
    }

    @Override
    public CompletableFuture<Void> unlease(String volume, String owner, long leaseId) {
        return call(() -> {
            session.unlease(volume, owner, leaseId);
            return null;
        });
    }

    @Override
    public CompletableFuture<ServerInfo> info() {
        return call(session::serverInfo);
    }

    @Override
    public CompletableFuture<dev.rbridge.rdma.ServerState> state() {
        return call(session::state);
    }

    @Override
    public CompletableFuture<Void> read(RegionDescriptor region, long offset, MemorySegment dst) {
        if (!dst.isAccessibleBy(SOME_OTHER_THREAD)) {
            // Same rule as the network providers, so code that works here works there too.
            return CompletableFuture.failedFuture(new IllegalArgumentException("a read buffer must be shared memory "
                    + "(Arena.ofShared, ofAuto or global)"));
        }
        return call(() -> {
            try (RegionService.Pin pin = session.pin(region.id(), region.key(), offset, dst.byteSize())) {
                pin.runs((at, length, written) -> {
                    if (written) {
                        MemorySegment.copy(pin.memory(), at, dst, at, length);
                    } else {
                        dst.asSlice(at, length).fill((byte) 0); // never written: not worth a page of the region
                    }
                });
            }
            stats.readOps.increment();
            stats.readBytes.add(dst.byteSize());
            return null;
        });
    }

    @Override
    public CompletableFuture<Void> write(RegionDescriptor region, long offset, MemorySegment src) {
        return call(() -> {
            try (RegionService.Pin pin = session.pin(region.id(), region.key(), offset, src.byteSize())) {
                MemorySegment.copy(src, 0, pin.memory(), 0, src.byteSize());
                pin.wrote();
            }
            stats.writeOps.increment();
            stats.writeBytes.add(src.byteSize());
            return null;
        });
    }

    @Override
    public CompletableFuture<Void> zero(RegionDescriptor region, long offset, long length) {
        return call(() -> {
            session.zero(region.id(), region.key(), offset, length);
            return null;
        });
    }

    @Override
    public CompletableFuture<Void> flush() {
        return call(() -> null); // every operation completed before it returned
    }

    @Override
    public ConnectionStats stats() {
        return stats;
    }

    void lost(String why) {
        closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, why));
    }

    @Override
    protected void tearDown(RemoteMemoryException cause) {
        session.closed();
        onClose.accept(this);
    }

    @Override
    public String toString() {
        return "local connection to " + peer;
    }
}
