package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteListener;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryProvider;

import java.io.IOException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;

/**
 * Remote memory over plain TCP, in pure Java: the default transport, needing nothing but a socket. The memserver side
 * plays the part of an RDMA NIC: it moves WRITE data from the socket straight into region memory and sends READ data
 * straight from it.
 */
public final class TcpProvider implements RemoteMemoryProvider {
    /**
     * Deadlines and hello guards of every tcp connection in this JVM: one thread, little work. A cancelled task leaves
     * the queue at once: a hello guard holds its connection, and a flood of connections that end long before their
     * guard would otherwise keep them all alive for the hello timeout.
     */
    static final ScheduledExecutorService TIMER = timer();

    private static ScheduledExecutorService timer() {
        ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, r -> {
            Thread thread = new Thread(r, "rdma-tcp-timer");
            thread.setDaemon(true);
            return thread;
        });
        t.setRemoveOnCancelPolicy(true);
        return t;
    }

    @Override
    public String name() {
        return "tcp";
    }

    @Override
    public RemoteConnection connect(ConnectParams params) throws RemoteMemoryException {
        return params.lanes() == 1 ? TcpConnection.connect(params) : TcpLanes.connect(params);
    }

    @Override
    public RemoteListener listen(ListenParams params, RegionService service) throws IOException {
        return TcpListener.start(params, service);
    }
}
