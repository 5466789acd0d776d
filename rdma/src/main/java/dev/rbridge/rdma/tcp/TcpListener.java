package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.GatedAcceptor;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.wire.Admission;
import dev.rbridge.rdma.wire.GatedListener;

import java.io.IOException;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;

/**
 * Accepts tcp-provider clients: one platform thread per connection, blocking on its socket, the fastest way to serve
 * the few busy clients a memserver has (the design prototypes in docs/transports.md). The accept loop and the start of each connection are the
 * shared {@link GatedListener}'s (limits, refusals, evictions, hello guards, surviving failures); every buffer of a
 * connection is made by the connection's own thread, small until the client authenticates ({@link
 * TcpServerConnection}).
 */
final class TcpListener extends GatedListener<TcpServerConnection> {
    /** Buffers of authenticated connections; as many idle as a busy memserver's churn of tool connections needs. */
    private final DirectBufferPool buffers = new DirectBufferPool(TcpServerConnection.BUFFER, 32);

    private TcpListener(ListenParams params, RegionService service) {
        super("tcp", params, service, TcpProvider.TIMER);
    }

    static TcpListener start(ListenParams params, RegionService service) throws IOException {
        ServerSocketChannel ch = GatedAcceptor.bind(params.address());
        TcpListener l = new TcpListener(params, service);
        l.accept(ch);
        return l;
    }

    @Override
    protected TcpServerConnection connection(SocketChannel channel, Admission admission) {
        return new TcpServerConnection(channel, admission, buffers, params().tcpCongestion(),
                params().helloTimeout().toMillis(), this::ended);
    }
}
