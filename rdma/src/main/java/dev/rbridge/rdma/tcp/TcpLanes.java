package dev.rbridge.rdma.tcp;

import dev.rbridge.common.splice.Pipe;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.ServerInfo;
import dev.rbridge.rdma.ServerState;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * One logical connection to a memserver made of several TCP connections ("lanes", {@link ConnectParams#lanes}). A
 * memserver serves each TCP connection on one thread, so a single connection caps a client at what one memserver
 * core can copy; lanes let large transfers use several, as NVMe-oF uses a queue pair per core.
 *
 * <p>Lane 0 carries everything that is not data (regions, leases, info), so the session that holds a volume's lease
 * is always the same one. READ, WRITE and ZERO go to the first lane that is not already busy with half a megabyte
 * (see {@link #dataLane}), so small operations and one operation at a time take lane 0 and cost what a single
 * connection costs, and large transfers spread. The memserver checks data
 * operations by region key alone, so any lane may carry them. FLUSH is sent on every lane. A lane that fails closes
 * the others with the same cause: the connection lives and dies as one, as callers expect of a connection.
 */
final class TcpLanes implements RemoteConnection {
    /** Outstanding bytes beyond which a lane is full enough that the next data operation tries another. */
    static final long SPILL_BYTES = 512 << 10;

    private final TcpConnection[] lanes;
    private final ConnectionStats stats;

    private TcpLanes(TcpConnection[] lanes, ConnectionStats stats) {
        this.lanes = lanes;
        this.stats = stats;
        for (TcpConnection lane : lanes) {
            lane.onClosed(this::closeAll);
        }
    }

    static RemoteConnection connect(ConnectParams params) throws RemoteMemoryException {
        int n = params.lanes();
        ConnectionStats stats = new ConnectionStats();
        TcpConnection[] lanes = new TcpConnection[n];
        try {
            for (int i = 0; i < n; i++) {
                // The memserver lists each lane as a client; the name says which logical connection it belongs to.
                String name = i == 0 ? params.clientName() : params.clientName() + " (lane " + (i + 1) + "/" + n + ")";
                lanes[i] = TcpConnection.connect(params, name, stats);
            }
        } catch (RemoteMemoryException e) {
            for (TcpConnection lane : lanes) {
                if (lane != null) {
                    lane.close();
                }
            }
            throw e;
        }
        return new TcpLanes(lanes, stats);
    }

    private void closeAll(RemoteMemoryException cause) {
        for (TcpConnection lane : lanes) {
            lane.closeWithCause(cause);
        }
    }

    /**
     * The first lane with less than {@link #SPILL_BYTES} outstanding, else the least busy. Filling one lane before
     * spilling keeps small operations together (one memserver thread answers a burst of them with one system call;
     * spreading 4K QD32 over four lanes cost twice the CPU per byte) while large transfers spread over the lanes.
     */
    private TcpConnection dataLane() {
        TcpConnection least = lanes[0];
        long leastBusy = Long.MAX_VALUE;
        for (TcpConnection lane : lanes) {
            long busy = lane.busyBytes();
            if (busy < SPILL_BYTES) {
                return lane;
            }
            if (busy < leastBusy) {
                leastBusy = busy;
                least = lane;
            }
        }
        return least;
    }

    @Override
    public ServerInfo server() {
        return lanes[0].server();
    }

    @Override
    public CompletableFuture<RegionDescriptor> allocate(RegionTag tag, long length) {
        return lanes[0].allocate(tag, length);
    }

    @Override
    public CompletableFuture<RegionDescriptor> open(long regionId) {
        return lanes[0].open(regionId);
    }

    @Override
    public CompletableFuture<List<RegionInfo>> list() {
        return lanes[0].list();
    }

    @Override
    public CompletableFuture<Void> release(RegionDescriptor region) {
        return lanes[0].release(region);
    }

    @Override
    public CompletableFuture<RegionDescriptor> retag(RegionDescriptor region, RegionTag tag) {
        return lanes[0].retag(region, tag);
    }

    @Override
    public CompletableFuture<Lease> lease(String volume, String owner, Duration ttl) {
        return lanes[0].lease(volume, owner, ttl);
    }

    @Override
    public CompletableFuture<Lease> lease(String volume, String owner, Duration ttl, long leaseId) {
        return lanes[0].lease(volume, owner, ttl, leaseId);
    }

    @Override
    public CompletableFuture<Void> unlease(String volume, String owner, long leaseId) {
        return flush().thenCompose(done -> lanes[0].unlease(volume, owner, leaseId)); // see unlease(volume, owner)
    }

    @Override
    public CompletableFuture<Void> unlease(String volume, String owner) {
        // Over one connection an answered UNLEASE means every write before it is done, and the next owner trusts a
        // clean handover for that (it skips the resync). Lane 0 alone cannot say so for the other lanes' writes.
        return flush().thenCompose(done -> lanes[0].unlease(volume, owner));
    }

    @Override
    public CompletableFuture<ServerInfo> info() {
        return lanes[0].info();
    }

    @Override
    public CompletableFuture<ServerState> state() {
        return lanes[0].state();
    }

    @Override
    public CompletableFuture<Void> read(RegionDescriptor region, long offset, MemorySegment dst) {
        return dataLane().read(region, offset, dst);
    }

    @Override
    public CompletableFuture<Integer> readSpliced(RegionDescriptor region, long offset, MemorySegment dst,
            Pipe pipe) {
        return dataLane().readSpliced(region, offset, dst, pipe);
    }

    @Override
    public CompletableFuture<Void> write(RegionDescriptor region, long offset, MemorySegment src) {
        return dataLane().write(region, offset, src);
    }

    @Override
    public CompletableFuture<Void> zero(RegionDescriptor region, long offset, long length) {
        return dataLane().zero(region, offset, length);
    }

    @Override
    public CompletableFuture<Void> flush() {
        // Each lane answers FLUSH after everything issued on it before; all lanes together cover every operation.
        CompletableFuture<?>[] all = new CompletableFuture<?>[lanes.length];
        for (int i = 0; i < lanes.length; i++) {
            all[i] = lanes[i].flush();
        }
        return CallerDrivenReading.allOf(all);
    }

    @Override
    public ConnectionStats stats() {
        return stats;
    }

    @Override
    public boolean isOpen() {
        for (TcpConnection lane : lanes) {
            if (!lane.isOpen()) {
                return false;
            }
        }
        return true;
    }

    @Override
    public void close() {
        lanes[0].close(); // the others follow with the same cause
    }

    @Override
    public String toString() {
        return lanes[0] + " (" + lanes.length + " lanes)";
    }
}
