package dev.rbridge.nbd.server;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The NBD server: one acceptor thread per listening address and one platform thread per connection (measured faster
 * than virtual threads or a selector for a few busy connections; see shared/notes/transports.md).
 *
 * <p>{@link #close()} is a graceful shutdown: stop accepting, refuse new options and requests with the spec's
 * shutdown errors, wait up to the drain timeout for in-flight requests, then close every connection.
 */
public final class NbdServer implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(NbdServer.class);

    private final NbdServerConfig config;
    private final BufferPool bufferPool;
    private final List<ServerSocketChannel> listeners = new ArrayList<>();
    private final List<ListenAddress> bound = new ArrayList<>();
    private final Set<Connection> connections = ConcurrentHashMap.newKeySet();
    private final ScheduledExecutorService timer;
    private final AtomicLong nextId = new AtomicLong(1);
    private final CountDownLatch terminated = new CountDownLatch(1);
    private volatile boolean closing;

    private NbdServer(NbdServerConfig config) {
        this.config = config;
        int largest = config.exports().stream().mapToInt(Export::maximumPayload).max().orElse(Export.DEFAULT_MAXIMUM_PAYLOAD);
        this.bufferPool = new BufferPool(largest, config.bufferPoolRetainBytes());
        this.timer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "nbd-timer");
            t.setDaemon(true);
            return t;
        });
    }

    /** Binds every configured address and starts serving. On a bind failure nothing is left listening. */
    public static NbdServer start(NbdServerConfig config) throws IOException {
        NbdServer server = new NbdServer(config);
        try {
            for (ListenAddress address : config.listen()) {
                server.bind(address);
            }
        } catch (IOException | RuntimeException e) {
            server.closeListeners();
            server.timer.shutdownNow();
            throw e;
        }
        for (int i = 0; i < server.listeners.size(); i++) {
            ServerSocketChannel listener = server.listeners.get(i);
            ListenAddress address = server.bound.get(i);
            Thread t = new Thread(() -> server.acceptLoop(listener, address), "nbd-accept-" + address);
            t.setDaemon(true);
            t.start();
            for (Export e : config.exports()) {
                log.info("serving export '{}' ({} bytes{}) at {}", e.name(), e.size(), e.readOnly() ? ", read-only" : "",
                        address.uri(e.name()));
            }
        }
        return server;
    }

    private void bind(ListenAddress address) throws IOException {
        ServerSocketChannel ch;
        if (address instanceof ListenAddress.Unix unix) {
            removeStaleSocket(unix.path());
            ch = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        } else {
            ch = ServerSocketChannel.open();
            ch.setOption(StandardSocketOptions.SO_REUSEADDR, true);
        }
        try {
            ch.bind(address.socketAddress(), 128);
        } catch (IOException e) {
            ch.close();
            throw new IOException("cannot listen on " + address + ": " + e.getMessage(), e);
        }
        listeners.add(ch);
        if (address instanceof ListenAddress.Tcp tcp) {
            // Port 0 asks the kernel for a free port; report the one we got.
            InetSocketAddress local = (InetSocketAddress) ch.getLocalAddress();
            bound.add(new ListenAddress.Tcp(tcp.host(), local.getPort()));
        } else {
            bound.add(address);
        }
    }

    /** A socket file left by a server that died is removed; one with a live server behind it is an error. */
    private static void removeStaleSocket(Path path) throws IOException {
        if (!Files.exists(path)) {
            return;
        }
        try (SocketChannel probe = SocketChannel.open(StandardProtocolFamily.UNIX)) {
            probe.connect(java.net.UnixDomainSocketAddress.of(path));
            throw new IOException("another server is already listening on " + path);
        } catch (java.net.ConnectException e) {
            Files.delete(path);
        }
    }

    private void acceptLoop(ServerSocketChannel listener, ListenAddress address) {
        while (!closing) {
            SocketChannel ch;
            try {
                ch = listener.accept();
            } catch (ClosedChannelException e) {
                return;
            } catch (IOException e) {
                log.warn("accept on {} failed: {}", address, e.getMessage());
                sleep(50); // e.g. out of file descriptors: back off instead of spinning
                continue;
            }
            String peer = peerOf(ch, address);
            if (closing) {
                closeQuietly(ch);
                return;
            }
            if (connections.size() >= config.maxConnections()) {
                log.warn("refusing connection from {}: already {} connections (the limit)", peer, connections.size());
                closeQuietly(ch);
                continue;
            }
            try {
                if (address instanceof ListenAddress.Tcp) {
                    ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
                    // a client whose host vanished (no FIN, no RST) is found by the kernel and its thread freed
                    ch.setOption(StandardSocketOptions.SO_KEEPALIVE, true);
                    config.tcpSocketSetup().accept(ch);
                }
            } catch (IOException e) {
                closeQuietly(ch);
                continue;
            }
            Connection c = new Connection(this, ch, nextId.getAndIncrement(), peer);
            connections.add(c);
            log.debug("connection {} from {} accepted on {}", c.id(), peer, address);
            timer.schedule(() -> {
                if (!c.inTransmission() && connections.contains(c)) {
                    log.info("connection {} from {}: handshake not finished within {}; closing", c.id(), peer,
                            config.handshakeTimeout());
                    c.closeChannel();
                }
            }, config.handshakeTimeout().toMillis(), TimeUnit.MILLISECONDS);
            Thread t = new Thread(c, "nbd-conn-" + c.id());
            t.setDaemon(true);
            t.start();
        }
    }

    private static String peerOf(SocketChannel ch, ListenAddress address) {
        try {
            return address instanceof ListenAddress.Unix ? "unix:" + address : String.valueOf(ch.getRemoteAddress());
        } catch (IOException e) {
            return "unknown peer";
        }
    }

    NbdServerConfig config() {
        return config;
    }

    BufferPool bufferPool() {
        return bufferPool;
    }

    boolean closing() {
        return closing;
    }

    void connectionEnded(Connection c) {
        connections.remove(c);
    }

    /** The addresses actually bound (TCP port 0 replaced by the port the kernel chose). */
    public List<ListenAddress> addresses() {
        return List.copyOf(bound);
    }

    public int connectionCount() {
        return connections.size();
    }

    @Override
    public void close() {
        shutdown(config.drainTimeout());
    }

    /** Graceful shutdown, waiting at most {@code drain} for in-flight requests. Safe to call more than once. */
    public void shutdown(Duration drain) {
        synchronized (this) {
            if (closing) {
                awaitTermination();
                return;
            }
            closing = true;
        }
        log.info("shutting down: no new connections; draining {} connection(s) for up to {}", connections.size(), drain);
        closeListeners();
        for (Connection c : connections) {
            c.beginDrain();
        }
        long deadline = System.nanoTime() + drain.toNanos();
        while (System.nanoTime() < deadline && !connections.stream().allMatch(Connection::quiescent)) {
            sleep(5);
        }
        int unfinished = (int) connections.stream().filter(c -> !c.quiescent()).count();
        if (unfinished > 0) {
            log.warn("{} connection(s) still had requests in flight after {}; closing them anyway", unfinished, drain);
        }
        for (Connection c : connections) {
            c.closeChannel();
        }
        long closeDeadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (!connections.isEmpty() && System.nanoTime() < closeDeadline) {
            sleep(5);
        }
        timer.shutdownNow();
        log.info("shut down");
        terminated.countDown();
    }

    /** Blocks until {@link #shutdown} has finished. */
    public void awaitTermination() {
        try {
            terminated.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private void closeListeners() {
        for (int i = 0; i < listeners.size(); i++) {
            closeQuietly(listeners.get(i));
            if (i < bound.size() && bound.get(i) instanceof ListenAddress.Unix unix) {
                try {
                    Files.deleteIfExists(unix.path());
                } catch (IOException e) {
                    log.debug("could not remove socket {}", unix.path(), e);
                }
            }
        }
    }

    private static void closeQuietly(java.io.Closeable c) {
        try {
            c.close();
        } catch (IOException e) {
            log.debug("close failed", e);
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
