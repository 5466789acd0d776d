package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteListener;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/** Accepts tcp-provider clients: one platform thread per connection, as measured fastest for few busy clients. */
final class TcpListener implements RemoteListener {
    private static final Logger log = LoggerFactory.getLogger(TcpListener.class);

    private final ServerSocketChannel server;
    private final InetSocketAddress address;
    private final ListenParams params;
    private final RegionService service;
    private final Set<TcpServerConnection> connections = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;

    private TcpListener(ServerSocketChannel server, ListenParams params, RegionService service) throws IOException {
        this.server = server;
        this.address = (InetSocketAddress) server.getLocalAddress();
        this.params = params;
        this.service = service;
    }

    static TcpListener start(ListenParams params, RegionService service) throws IOException {
        ServerSocketChannel ch = ServerSocketChannel.open();
        try {
            ch.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            ch.bind(params.address(), 128);
        } catch (IOException e) {
            ch.close();
            throw new IOException("cannot listen on " + params.address().getHostString() + ":"
                    + params.address().getPort() + ": " + e.getMessage(), e);
        }
        TcpListener l = new TcpListener(ch, params, service);
        Thread t = new Thread(l::acceptLoop, "rdma-tcp-accept");
        t.setDaemon(true);
        t.start();
        return l;
    }

    private void acceptLoop() {
        while (!closed) {
            SocketChannel ch;
            try {
                ch = server.accept();
                Wire.tune(ch);
                TcpCongestion.apply(ch, params.tcpCongestion());
            } catch (ClosedChannelException e) {
                return;
            } catch (IOException e) {
                log.warn("accept failed: {}", e.getMessage());
                try {
                    Thread.sleep(50);
                } catch (InterruptedException ie) {
                    return;
                }
                continue;
            }
            TcpServerConnection c = new TcpServerConnection(ch, service, connections::remove);
            connections.add(c);
            TcpProvider.TIMER.schedule(c::helloDeadline, params.helloTimeout().toMillis(), TimeUnit.MILLISECONDS);
            Thread t = new Thread(c, "rdma-tcp-conn-" + c.peer());
            t.setDaemon(true);
            t.start();
        }
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
        try {
            server.close();
        } catch (IOException e) {
            log.debug("close failed", e);
        }
        connections.forEach(TcpServerConnection::close);
    }
}
