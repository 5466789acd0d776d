package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ConnectionGate;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.common.RateLimitedLog;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteListener;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * Accepts tcp-provider clients: one platform thread per connection, as measured fastest for few busy clients. The
 * accept thread allocates nothing for a connection but its thread: every buffer is made by the connection's own
 * thread, small until the client authenticates ({@link TcpServerConnection}), so no peer can make the accept loop run
 * out of memory, and the loop survives whatever else goes wrong (it backs off and goes on). Connections are admitted
 * by a {@link ConnectionGate} under the listen parameters' limits; refusals are counted through
 * {@link RegionService#refused} and logged at most once per reason every few seconds.
 */
final class TcpListener implements RemoteListener {
    private static final Logger log = LoggerFactory.getLogger(TcpListener.class);
    private static final RateLimitedLog limited = new RateLimitedLog(log);
    /** Backoff after a failed accept (no file descriptors left, say): starts small, doubles, stays under a second. */
    private static final long BACKOFF_MIN_MILLIS = 5;
    private static final long BACKOFF_MAX_MILLIS = 1000;

    private final ServerSocketChannel server;
    private final InetSocketAddress address;
    private final ListenParams params;
    private final RegionService service;
    private final ConnectionGate gate;
    /** Buffers of authenticated connections; as many idle as a busy memserver's churn of tool connections needs. */
    private final BufferPool buffers = new BufferPool(TcpServerConnection.BUFFER, 32);
    private final Set<TcpServerConnection> connections = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;
    private volatile String problem;
    private Thread acceptThread;

    private TcpListener(ServerSocketChannel server, ListenParams params, RegionService service) throws IOException {
        this.server = server;
        this.address = (InetSocketAddress) server.getLocalAddress();
        this.params = params;
        this.service = service;
        this.gate = new ConnectionGate(params.limits());
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
        l.acceptThread = new Thread(l::acceptLoop, "rdma-tcp-accept-" + l.address.getPort());
        l.acceptThread.setDaemon(true);
        l.acceptThread.start();
        return l;
    }

    private void acceptLoop() {
        long backoff = 0;
        try {
            while (!closed) {
                SocketChannel ch;
                try {
                    ch = server.accept();
                } catch (ClosedChannelException e) {
                    if (!closed) {
                        problem = "its listening socket closed unexpectedly (" + e + ")";
                        log.error("tcp listener at {}: {}; no new clients can connect", describe(), problem);
                    }
                    return;
                } catch (Throwable e) { // too many open files, out of memory, ...: none of it is worth dying for
                    backoff = Math.min(BACKOFF_MAX_MILLIS, Math.max(BACKOFF_MIN_MILLIS, backoff * 2));
                    limited.warn("accept", "accepting a connection failed ({}); trying again in {} ms", e, backoff);
                    pause(backoff);
                    continue;
                }
                try {
                    take(ch);
                    backoff = 0;
                } catch (IOException e) {
                    // This peer's socket failed (reset before it was taken, say): its loss alone, no pause.
                    TcpConnection.closeQuietly(ch);
                    service.refused("accept_failed", null);
                    limited.info("accept_failed", "could not take a new connection ({}); dropped it", e.toString());
                } catch (Throwable e) { // out of memory or threads: give the process a moment
                    TcpConnection.closeQuietly(ch);
                    service.refused("accept_failed", null);
                    backoff = Math.min(BACKOFF_MAX_MILLIS, Math.max(BACKOFF_MIN_MILLIS, backoff * 2));
                    limited.warn("accept_failed", "could not take a new connection ({}); dropped it, accepting again "
                            + "in {} ms", e, backoff);
                    pause(backoff);
                }
            }
        } finally {
            if (!closed && problem == null) {
                problem = "its accept thread ended";
                log.error("tcp listener at {}: {}; no new clients can connect", describe(), problem);
            }
        }
    }

    /** Admits {@code ch} or turns it away, and starts its thread. */
    private void take(SocketChannel ch) throws IOException {
        InetSocketAddress remote = (InetSocketAddress) ch.getRemoteAddress();
        switch (gate.admit(remote.getAddress(), () -> TcpConnection.closeQuietly(ch))) {
            case ConnectionGate.Refused r -> {
                service.refused(r.reason(), remote);
                limited.info(r.reason(), "refused a connection from {}: {}", remote.getAddress().getHostAddress(),
                        r.why());
                refuse(ch, r.why());
            }
            case ConnectionGate.Admitted a -> {
                ConnectionGate.Eviction victim = a.evicted();
                if (victim != null) {
                    victim.slot().cut();
                    service.refused(victim.reason(), null);
                    limited.info(victim.reason(), "dropped a connection from {} that had not authenticated: {}",
                            victim.slot().peer().getHostAddress(), victim.why());
                }
                TcpServerConnection c = new TcpServerConnection(ch, remote, service, a.slot(), buffers,
                        params.tcpCongestion(), this::ended);
                connections.add(c);
                try {
                    c.guard(TcpProvider.TIMER.schedule(c::helloDeadline, params.helloTimeout().toMillis(),
                            TimeUnit.MILLISECONDS), params.helloTimeout().toMillis());
                    Thread t = new Thread(c, "rdma-tcp-conn-" + c.peer());
                    t.setDaemon(true);
                    t.start();
                } catch (Throwable e) {
                    c.abandon();
                    throw e;
                }
            }
        }
    }

    /**
     * Tells a refused peer why before closing: it may be an honest client that found the memserver full, and "the
     * connection was closed" would not tell it what to do. A fresh socket's send buffer takes the few bytes at once.
     */
    private static void refuse(SocketChannel ch, String why) {
        try {
            String message = "the memserver takes no more connections now: " + why;
            ByteBuffer b = Wire.allocate(Wire.HEADER + Wire.stringLength(message));
            Wire.header(b, Wire.HELLO, 0, Status.NO_CAPACITY.code(), Wire.stringLength(message));
            Wire.putString(b, message);
            ch.configureBlocking(false);
            ch.write(b.flip());
            ch.shutdownOutput();
            // Unread input makes the close a reset, which may destroy the answer before the peer reads it.
            ByteBuffer discard = ByteBuffer.allocate(4096);
            for (int i = 0; i < 4 && ch.read(discard.clear()) > 0; i++) {
                // its greeting, most likely
            }
        } catch (IOException e) {
            log.debug("could not tell a refused peer why: {}", e.toString());
        } finally {
            TcpConnection.closeQuietly(ch);
        }
    }

    private void ended(TcpServerConnection c) {
        connections.remove(c);
    }

    private static void pause(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt(); // the next accept fails with ClosedByInterruptException: reported
        }
    }

    private String describe() {
        return address.getHostString() + ":" + address.getPort();
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
    public String problem() {
        String p = problem;
        if (p == null && !closed && acceptThread != null && !acceptThread.isAlive()) {
            return "its accept thread ended";
        }
        return p;
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
