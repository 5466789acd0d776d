package dev.rbridge.rdma.local;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteListener;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryProvider;

import java.net.InetSocketAddress;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Remote memory inside one JVM: for the embedded mode, where the memserver and the bridge share a process. Addresses
 * name listeners in this JVM only; operations copy between the caller's buffer and region memory on the calling
 * thread and complete before they return. Same contract as every provider, minus the network.
 */
public final class LocalProvider implements RemoteMemoryProvider {
    private static final Map<InetSocketAddress, LocalListener> LISTENERS = new ConcurrentHashMap<>();
    private static final AtomicInteger NEXT_PORT = new AtomicInteger(40000);

    @Override
    public String name() {
        return "local";
    }

    @Override
    public RemoteConnection connect(ConnectParams params) throws RemoteMemoryException {
        LocalListener l = LISTENERS.get(params.address());
        if (l == null || !l.open()) {
            throw new RemoteMemoryException(RemoteMemoryException.Status.CONNECT_FAILED, "no local memserver at "
                    + params.address().getHostString() + ":" + params.address().getPort() + " in this process");
        }
        return l.connect(params);
    }

    @Override
    public RemoteListener listen(ListenParams params, RegionService service) {
        InetSocketAddress requested = params.address();
        InetSocketAddress address = requested.getPort() != 0 ? requested
                : new InetSocketAddress(requested.getHostString(), NEXT_PORT.getAndIncrement());
        LocalListener l = new LocalListener(address, service, () -> LISTENERS.remove(address));
        if (LISTENERS.putIfAbsent(address, l) != null) {
            throw new IllegalStateException("a local memserver already listens at " + address.getHostString() + ":"
                    + address.getPort());
        }
        return l;
    }
}
