package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ConnectionGate;
import dev.rbridge.rdma.GatedAcceptor;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteListener;
import dev.rbridge.rdma.wire.Admission;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Accepts tcp-provider clients: one platform thread per connection, as measured fastest for few busy clients. The
 * accept loop is the shared {@link GatedAcceptor} (limits, refusals, evictions, surviving failures); every buffer of a
 * connection is made by the connection's own thread, small until the client authenticates ({@link
 * TcpServerConnection}).
 */
final class TcpListener implements RemoteListener {
    private final ListenParams params;
    private final RegionService service;
    /** Buffers of authenticated connections; as many idle as a busy memserver's churn of tool connections needs. */
    private final BufferPool buffers = new BufferPool(TcpServerConnection.BUFFER, 32);
    private final Set<TcpServerConnection> connections = ConcurrentHashMap.newKeySet();
    private GatedAcceptor acceptor;

    private TcpListener(ListenParams params, RegionService service) {
        this.params = params;
        this.service = service;
    }

    static TcpListener start(ListenParams params, RegionService service) throws IOException {
        ServerSocketChannel ch = GatedAcceptor.bind(params.address());
        TcpListener l = new TcpListener(params, service);
        l.acceptor = GatedAcceptor.start("tcp", ch, params.limits(), service, l::serve);
        return l;
    }

    /** Starts an admitted connection's thread, its hello guard running. */
    private void serve(SocketChannel ch, InetSocketAddress remote, ConnectionGate.Slot slot) {
        TcpServerConnection c = new TcpServerConnection(ch, new Admission(service, remote, slot), buffers,
                params.tcpCongestion(), params.helloTimeout().toMillis(), this::ended);
        connections.add(c);
        try {
            c.guard();
            Thread t = new Thread(c, "rdma-tcp-conn-" + c.peer());
            t.setDaemon(true);
            t.start();
        } catch (Throwable e) {
            c.abandon();
            throw e;
        }
    }

    private void ended(TcpServerConnection c) {
        connections.remove(c);
    }

    @Override
    public InetSocketAddress address() {
        return acceptor.address();
    }

    @Override
    public int connectionCount() {
        return connections.size();
    }

    @Override
    public String problem() {
        return acceptor.problem();
    }

    @Override
    public void close() {
        acceptor.close();
        connections.forEach(TcpServerConnection::close);
    }
}
