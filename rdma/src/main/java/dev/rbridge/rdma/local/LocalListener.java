package dev.rbridge.rdma.local;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteListener;
import dev.rbridge.rdma.RemoteMemoryException;

import java.net.InetSocketAddress;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/** A memserver's endpoint in this JVM. Closing it cuts every connection, as a dead server would. */
final class LocalListener implements RemoteListener {
    private final InetSocketAddress address;
    private final RegionService service;
    private final Runnable unregister;
    private final Set<LocalConnection> connections = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;

    LocalListener(InetSocketAddress address, RegionService service, Runnable unregister) {
        this.address = address;
        this.service = service;
        this.unregister = unregister;
    }

    boolean open() {
        return !closed;
    }

    RemoteConnection connect(ConnectParams params) throws RemoteMemoryException {
        RegionService.Session session = service.open(new RegionService.Credential.Token(params.token()),
                params.clientName(), address);
        LocalConnection c = new LocalConnection(session, address, connections::remove);
        connections.add(c);
        return c;
    }

    @Override
    public InetSocketAddress address() {
        return address;
    }

    @Override
    public int connectionCount() {
        return connections.size();
    }

    @Override
    public void close() {
        closed = true;
        unregister.run();
        for (LocalConnection c : connections) {
            c.lost("local memserver at " + address.getHostString() + ":" + address.getPort() + " stopped");
        }
    }
}
