package dev.rbridge.rdma.wire;

import dev.rbridge.rdma.ConnectionLifecycle;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.ServerInfo;
import dev.rbridge.rdma.ServerState;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * The control plane of a client connection, for every transport that speaks the control protocol: what the greeting
 * said about the memserver ({@link #server}), and each region, lease and info operation as the {@link ControlClient}
 * operation it is, issued through the transport's {@link #call}. The data plane (READ, WRITE, ZERO, FLUSH) and the
 * connection's teardown ({@link ConnectionLifecycle}) are the transport's own; so is what else a new or opened region needs before it is handed out
 * (the ucx provider maps it), which is why only {@link #allocate} and {@link #open} may be overridden.
 */
public abstract class ControlPlaneConnection extends ConnectionLifecycle {
    private final ServerInfo server;

    /** {@code server}: the memserver as its greeting described it; {@code memserver} as a sentence names it. */
    protected ControlPlaneConnection(ServerInfo server, String memserver) {
        super(memserver);
        this.server = server;
    }

    /**
     * Issues {@code op}: the transport sends its request and completes the result from the reply, or fails it with
     * the {@link dev.rbridge.rdma.RemoteMemoryException} the reply or the connection's end means.
     */
    protected abstract <T> CompletableFuture<T> call(ControlClient.Operation<T> op);

    @Override
    public final ServerInfo server() {
        return server;
    }

    @Override
    public CompletableFuture<RegionDescriptor> allocate(RegionTag tag, long length) {
        return call(ControlClient.allocate(tag, length));
    }

    @Override
    public CompletableFuture<RegionDescriptor> open(long regionId) {
        return call(ControlClient.open(regionId));
    }

    @Override
    public final CompletableFuture<List<RegionInfo>> list() {
        return call(ControlClient.list());
    }

    @Override
    public final CompletableFuture<Void> release(RegionDescriptor region) {
        return call(ControlClient.release(region));
    }

    @Override
    public final CompletableFuture<RegionDescriptor> retag(RegionDescriptor region, RegionTag tag) {
        return call(ControlClient.retag(region, tag));
    }

    @Override
    public final CompletableFuture<Lease> lease(String volume, String owner, Duration ttl) {
        return call(ControlClient.lease(volume, owner, ttl, Lease.NO_ID));
    }

    @Override
    public final CompletableFuture<Lease> lease(String volume, String owner, Duration ttl, long leaseId) {
        return call(ControlClient.lease(volume, owner, ttl, leaseId));
    }

    @Override
    public final CompletableFuture<Void> unlease(String volume, String owner, long leaseId) {
        return call(ControlClient.unlease(volume, owner, leaseId));
    }

    @Override
    public final CompletableFuture<Void> unlease(String volume, String owner) {
        return call(ControlClient.unlease(volume, owner, Lease.NO_ID));
    }

    @Override
    public final CompletableFuture<ServerInfo> info() {
        return call(ControlClient.info());
    }

    @Override
    public final CompletableFuture<ServerState> state() {
        return ControlClient.predatesAsServing(call(ControlClient.state()));
    }
}
