package dev.rbridge.nbd.server;

import dev.rbridge.common.Closeables;
import dev.rbridge.common.Durations;
import dev.rbridge.common.PeerGroup;
import dev.rbridge.common.RateLimitedLog;
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
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The NBD server: one acceptor thread per listening address, one platform thread per connection (for a few busy
 * connections that beats virtual threads and one shared selector: docs/transports.md), and a housekeeper that enforces
 * the time limits.
 *
 * <p>Slots: at most {@code maxConnections} connections, {@code maxConnectionsPerPeer} from one address; who makes way
 * for a new connection over a limit is decided by the {@link ConnectionSlots}. The time limits are kept by the
 * {@link Housekeeper}.
 *
 * <p>{@link #close()} is a graceful shutdown: stop accepting, refuse new options and requests with the spec's
 * shutdown errors, wait up to the drain timeout for in-flight requests, then close every connection.
 */
public final class NbdServer implements AutoCloseable {
    /** The file type bits of a stat mode, and a socket's (Linux's S_IFMT and S_IFSOCK). */
    private static final int S_IFMT = 0170000;
    private static final int S_IFSOCK = 0140000;
    private static final Logger log = LoggerFactory.getLogger(NbdServer.class);
    /** The send buffer asked for each TCP connection (see {@link #admit}). */
    private static final int SEND_BUFFER = 4 << 20;

    private final NbdServerConfig config;
    private final BufferPool bufferPool;
    private final PayloadBudget payloadBudget;
    private final RateLimitedLog limitedLog = new RateLimitedLog(log);
    private final List<ServerSocketChannel> listeners = new ArrayList<>();
    private final List<ListenAddress> bound = new ArrayList<>();
    private final ConnectionSlots slots;
    private final Housekeeper housekeeper;
    private final AtomicLong nextId = new AtomicLong(1);
    private final CountDownLatch terminated = new CountDownLatch(1);
    /** What stopped although the server is not closing (a listener, the housekeeper), and why. */
    private final Map<String, String> failures = new ConcurrentHashMap<>();
    private volatile boolean closing;

    private NbdServer(NbdServerConfig config) {
        this.config = config;
        int largest = config.exports().stream().mapToInt(Export::maximumPayload).max()
                .orElse(Export.DEFAULT_MAXIMUM_PAYLOAD);
        this.bufferPool = new BufferPool(largest, config.bufferPoolRetainBytes(), config.payloadMemory());
        this.payloadBudget = new PayloadBudget(config.payloadBudget(), config.payloadBudgetPerPeer(),
                config.payloadBudgetPerConnection());
        this.slots = new ConnectionSlots(config, limitedLog);
        this.housekeeper = new Housekeeper(this, slots, limitedLog);
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
            throw e;
        }
        server.housekeeper.start();
        config.metrics().serverStarted(server.state());
        for (int i = 0; i < server.listeners.size(); i++) {
            ServerSocketChannel listener = server.listeners.get(i);
            ListenAddress address = server.bound.get(i);
            Thread t = new Thread(() -> server.acceptLoop(listener, address), "nbd-accept-" + address);
            t.setDaemon(true);
            t.start();
            for (Export e : config.exports()) {
                log.info("serving export '{}' ({} bytes{}) at {}", e.name(), e.size(),
                        e.readOnly() ? ", read-only" : "", address.uri(e.name()));
            }
        }
        log.info("TLS: {}", config.tls());
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
            throw new IOException("cannot listen on " + address + ": " + e.getMessage()
                    + (e instanceof java.net.BindException && String.valueOf(e.getMessage()).contains("in use")
                            ? " (another process has the port: stop it, or give --listen another)"
                            : ""),
                    e);
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

    /**
     * A socket file left by a server that died is removed; one with a live server behind it is an error, and so is
     * anything at {@code path} that is not a socket (a regular file, a directory, a symbolic link): never deleted.
     */
    private static void removeStaleSocket(Path path) throws IOException {
        if (!Files.exists(path, LinkOption.NOFOLLOW_LINKS)) {
            return;
        }
        int mode = (Integer) Files.getAttribute(path, "unix:mode", LinkOption.NOFOLLOW_LINKS);
        if ((mode & S_IFMT) != S_IFSOCK) {
            throw new IOException("cannot listen on unix:" + path + ": it exists and is not a socket (a "
                    + (Files.isSymbolicLink(path) ? "symbolic link"
                            : Files.isDirectory(path, LinkOption.NOFOLLOW_LINKS)
                                    ? "directory"
                                    : Files.isRegularFile(path, LinkOption.NOFOLLOW_LINKS) ? "regular file"
                                            : "special file")
                    + "), so it is left alone: give --unix another path, or remove it");
        }
        try (SocketChannel probe = SocketChannel.open(StandardProtocolFamily.UNIX)) {
            probe.connect(java.net.UnixDomainSocketAddress.of(path));
            throw new IOException("another server is already listening on " + path);
        } catch (java.net.ConnectException e) {
            Files.delete(path);
        }
    }

    /**
     * Accepts until the listener closes; no failure (not even running out of memory) ends it. Should it end anyway
     * while the server runs, {@link #failures()} says so and readiness with it.
     */
    private void acceptLoop(ServerSocketChannel listener, ListenAddress address) {
        String why = "it stopped";
        try {
            while (!closing) {
                SocketChannel ch;
                try {
                    ch = listener.accept();
                } catch (ClosedChannelException e) {
                    why = "its socket was closed";
                    return;
                } catch (IOException | RuntimeException | Error e) {
                    // e.g. out of file descriptors or memory: back off instead of spinning
                    limitedLog.warn("accept", "accept on {} failed: {}", address, e.toString());
                    sleep(50);
                    continue;
                }
                try {
                    admit(ch, address);
                } catch (IOException | RuntimeException e) {
                    // this peer's socket failed (reset before we set it up): nothing to wait for
                    limitedLog.warn("admit", "could not serve a connection on {}: {}", address, e.toString());
                    Closeables.closeQuietly(ch);
                } catch (Error e) {
                    limitedLog.warn("admit", "could not serve a connection on {}: {}", address, e.toString());
                    Closeables.closeQuietly(ch);
                    sleep(50); // out of memory or threads: give what is running room to finish
                }
            }
        } finally {
            if (!closing) {
                failed("listener " + address, why);
                log.error("the NBD listener on {} ended ({}); no new connections are accepted there", address, why);
            }
        }
    }

    private void admit(SocketChannel ch, ListenAddress address) throws IOException {
        String peerAddress = address instanceof ListenAddress.Unix ? "unix" : hostOf(ch);
        String peer = address instanceof ListenAddress.Unix ? "unix:" + address : peerAddress + ":" + portOf(ch);
        if (closing) {
            Closeables.closeQuietly(ch);
            return;
        }
        if (address instanceof ListenAddress.Tcp) {
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            // a client whose host vanished (no FIN, no RST) is found by the kernel and its thread freed
            ch.setOption(StandardSocketOptions.SO_KEEPALIVE, true);
            // A fixed send buffer as large as the host allows (the kernel doubles it, up to net.core.wmem_max): on a
            // non-blocking socket autotuning leaves it too small for a batch of large READ replies, and a batch that
            // does not fit goes out in rounds through the selector (bench/README.md has the measurement). Memory is
            // used only while data waits, and a client that reads nothing is closed at --reply-timeout.
            ch.setOption(StandardSocketOptions.SO_SNDBUF, SEND_BUFFER);
            config.tcpSocketSetup().accept(ch);
        }
        Connection c = new Connection(this, ch, nextId.getAndIncrement(), peer, peerAddress);
        if (!slots.take(c)) {
            Closeables.closeQuietly(ch);
            return;
        }
        log.debug("connection {} from {} accepted on {}", c.id(), peer, address);
        Thread t = new Thread(c, "nbd-conn-" + c.id());
        t.setDaemon(true);
        try {
            t.start();
        } catch (OutOfMemoryError e) { // no native thread to be had
            slots.free(c);
            throw e;
        }
    }

    private static String hostOf(SocketChannel ch) {
        try {
            // what the per-peer limits count by: the IPv4 address, or the IPv6 address's /64
            return ch.getRemoteAddress() instanceof InetSocketAddress i ? PeerGroup.of(i.getAddress()).name()
                    : "unknown";
        } catch (IOException e) {
            return "unknown";
        }
    }

    private static String portOf(SocketChannel ch) {
        try {
            return ch.getRemoteAddress() instanceof InetSocketAddress i ? String.valueOf(i.getPort()) : "?";
        } catch (IOException e) {
            return "?";
        }
    }

    /** {@code what} stopped although the server is not closing, for {@code why}: the server is not ready. */
    void failed(String what, String why) {
        failures.put(what, why);
    }

    /**
     * {@code c} finished its handshake and enters transmission: false when it was let in over a limit and no connection
     * is idle to make room for it now (it must close). See {@link ConnectionSlots#enterTransmission}.
     */
    boolean enterTransmission(Connection c) {
        return slots.enterTransmission(c);
    }

    void logLimited(String kind, String format, Object... args) {
        limitedLog.warn(kind, format, args);
    }

    /** The live figures for metrics. */
    private final class State implements NbdServerState {
        @Override
        public int connections() {
            return slots.count();
        }

        @Override
        public long payloadBudgetBytes() {
            return payloadBudget.total();
        }

        @Override
        public long payloadUsedBytes() {
            return payloadBudget.used();
        }

        @Override
        public int payloadWaiting() {
            return payloadBudget.waiting();
        }

        @Override
        public long payloadPooledBytes() {
            return bufferPool.idleBytes();
        }
    }

    NbdServerConfig config() {
        return config;
    }

    BufferPool bufferPool() {
        return bufferPool;
    }

    PayloadBudget payloadBudget() {
        return payloadBudget;
    }

    boolean closing() {
        return closing;
    }

    void connectionEnded(Connection c) {
        slots.free(c);
    }

    /** The addresses actually bound (TCP port 0 replaced by the port the kernel chose). */
    public List<ListenAddress> addresses() {
        return List.copyOf(bound);
    }

    public int connectionCount() {
        return slots.count();
    }

    /**
     * Sessions idle now: connections in transmission with nothing in flight, half-received, held or waiting to be
     * written. At a connection limit, a newcomer takes the place of one of these or is refused.
     */
    public int idleConnections() {
        return (int) slots.connections().stream().filter(c -> c.inTransmission() && c.idle()).count();
    }

    /**
     * What stopped while the server runs, each with the reason: a listener (its socket closed under it) or the
     * housekeeper that enforces the time limits. A process in this state is not ready.
     */
    public Map<String, String> failures() {
        return Map.copyOf(failures);
    }

    /** What the server holds now (connections, payload memory). */
    public NbdServerState state() {
        return new State();
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
        Set<Connection> connections = slots.connections();
        log.info("shutting down: no new connections; draining {} connection(s) for up to {}", connections.size(),
                Durations.human(drain));
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
            log.warn("{} connection(s) still had requests in flight after {}; closing them anyway", unfinished,
                    Durations.human(drain));
        }
        for (Connection c : connections) {
            c.closeChannel();
        }
        long closeDeadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (!connections.isEmpty() && System.nanoTime() < closeDeadline) {
            sleep(5);
        }
        housekeeper.stop();
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
            Closeables.closeQuietly(listeners.get(i));
            if (i < bound.size() && bound.get(i) instanceof ListenAddress.Unix unix) {
                try {
                    Files.deleteIfExists(unix.path());
                } catch (IOException e) {
                    log.debug("could not remove socket {}", unix.path(), e);
                }
            }
        }
    }

    static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
