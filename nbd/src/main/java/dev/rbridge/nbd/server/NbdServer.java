package dev.rbridge.nbd.server;

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
import java.util.HashMap;
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
 * <p>Slots: at most {@code maxConnections} connections, {@code maxConnectionsPerPeer} from one address. A connection
 * that would pass either takes the slot of the oldest connection of that address still in its handshake (for the
 * global limit, of the address holding the most connections). A connection that has not finished its handshake never
 * costs a session its slot: when none is handshaking, the newcomer is let in on probation and takes the slot of the
 * longest-idle session of that address (for the global limit, of the address holding the most) only once its own
 * handshake is through; idle sessions are otherwise never closed (the kernel keeps them for days). When no session is
 * idle, the new one is refused.
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
    /** How often the housekeeper looks at every connection's clocks. */
    private static final long HOUSEKEEPING_MILLIS = 100;
    private static final long TRIM_NANOS = 1_000_000_000L;

    private final NbdServerConfig config;
    private final BufferPool bufferPool;
    private final PayloadBudget payloadBudget;
    private final RateLimitedLog limitedLog = new RateLimitedLog(log);
    private final List<ServerSocketChannel> listeners = new ArrayList<>();
    private final List<ListenAddress> bound = new ArrayList<>();
    /** Every open connection, and how many each address has; guarded by {@link #slots}. */
    private final Set<Connection> connections = ConcurrentHashMap.newKeySet();
    private final Map<String, Integer> perPeer = new HashMap<>();
    private final Object slots = new Object();
    /**
     * Connections let in over a limit (the value: which, "peer_limit" or "connection_limit") while still in their
     * handshake, each waiting to take an idle session's slot when it finishes; guarded by {@link #slots}.
     */
    private final Map<Connection, String> probation = new HashMap<>();
    private final Thread housekeeper;
    private final AtomicLong nextId = new AtomicLong(1);
    private final CountDownLatch terminated = new CountDownLatch(1);
    /** What stopped although the server is not closing (a listener, the housekeeper), and why. */
    private final Map<String, String> failures = new ConcurrentHashMap<>();
    private volatile boolean closing;

    private NbdServer(NbdServerConfig config) {
        this.config = config;
        int largest = config.exports().stream().mapToInt(Export::maximumPayload).max().orElse(Export.DEFAULT_MAXIMUM_PAYLOAD);
        this.bufferPool = new BufferPool(largest, config.bufferPoolRetainBytes(), config.payloadMemory());
        this.payloadBudget = new PayloadBudget(config.payloadBudget(), config.payloadBudgetPerPeer(),
                config.payloadBudgetPerConnection());
        this.housekeeper = new Thread(this::housekeeping, "nbd-housekeeper");
        housekeeper.setDaemon(true);
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
                log.info("serving export '{}' ({} bytes{}) at {}", e.name(), e.size(), e.readOnly() ? ", read-only" : "",
                        address.uri(e.name()));
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
                    ? " (another process has the port: stop it, or give --listen another)" : ""), e);
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
                    + (Files.isSymbolicLink(path) ? "symbolic link" : Files.isDirectory(path, LinkOption.NOFOLLOW_LINKS)
                    ? "directory" : Files.isRegularFile(path, LinkOption.NOFOLLOW_LINKS) ? "regular file"
                    : "special file") + "), so it is left alone: give --unix another path, or remove it");
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
                    closeQuietly(ch);
                } catch (Error e) {
                    limitedLog.warn("admit", "could not serve a connection on {}: {}", address, e.toString());
                    closeQuietly(ch);
                    sleep(50); // out of memory or threads: give what is running room to finish
                }
            }
        } finally {
            if (!closing) {
                failures.put("listener " + address, why);
                log.error("the NBD listener on {} ended ({}); no new connections are accepted there", address, why);
            }
        }
    }

    private void admit(SocketChannel ch, ListenAddress address) throws IOException {
        String peerAddress = address instanceof ListenAddress.Unix ? "unix" : hostOf(ch);
        String peer = address instanceof ListenAddress.Unix ? "unix:" + address : peerAddress + ":" + portOf(ch);
        if (closing) {
            closeQuietly(ch);
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
        if (!takeSlot(c)) {
            closeQuietly(ch);
            return;
        }
        log.debug("connection {} from {} accepted on {}", c.id(), peer, address);
        Thread t = new Thread(c, "nbd-conn-" + c.id());
        t.setDaemon(true);
        try {
            t.start();
        } catch (OutOfMemoryError e) { // no native thread to be had
            freeSlot(c);
            throw e;
        }
    }

    /**
     * Gives {@code c} a slot, if need be in place of a connection still in its handshake (the oldest of its address for
     * the per-address limit, of the address holding the most connections for the global one): a connection that has
     * not finished its handshake never costs a session its slot. When none is handshaking but a session is idle,
     * {@code c} is let in over the limit, on probation: the idle session makes way only once {@code c} finishes its
     * own handshake ({@link #enterTransmission}), and a newcomer meanwhile takes {@code c}'s place like any other
     * handshake's. False: refused.
     */
    private boolean takeSlot(Connection c) {
        Connection evicted;
        String reason;
        synchronized (slots) {
            String from = c.peerAddress();
            int mine = perPeer.getOrDefault(from, 0);
            if (mine >= config.maxConnectionsPerPeer()) {
                reason = "peer_limit";
            } else if (connections.size() >= config.maxConnections()) {
                reason = "connection_limit";
                from = busiestPeer(); // the address holding the most pays, as for idle sessions
            } else {
                reason = null;
            }
            evicted = reason == null ? null : oldestHandshake(from);
            if (evicted == null && reason != null && probation.size() >= maxProbation()) {
                evicted = oldestOnProbation(); // newcomers over the limit still handshaking make way for each other
            }
            if (evicted != null && !evicted.decideToClose("closed in its handshake to make room for a new connection"
                    + " (" + reason.replace('_', ' ') + ")")) {
                evicted = null; // the housekeeper got to it first: its slot is about to free anyway
            }
            if (reason != null && evicted == null) {
                String idleFrom = reason.equals("peer_limit") ? c.peerAddress() : busiestPeer();
                if (longestIdle(idleFrom, null) == null) {
                    config.metrics().connectionRefused(reason);
                    limitedLog.warn(reason, "refusing connection from {}: {} (none is in its handshake, none of {}"
                            + " is idle)", c.peer(), reason.equals("peer_limit") ? "its address already has " + mine
                                    + " connections, the limit" : "all " + connections.size()
                                    + " connection slots are busy",
                            reason.equals("peer_limit") ? "them" : "the connections of " + idleFrom);
                    return false;
                }
                probation.put(c, reason);
            }
            if (evicted != null) {
                release(evicted);
            }
            connections.add(c);
            perPeer.merge(c.peerAddress(), 1, Integer::sum);
        }
        if (evicted != null) { // decided under the slots lock: nobody else can have claimed it since
            config.metrics().connectionClosed("handshake_evicted");
            limitedLog.warn("handshake_evicted", "connection {} from {}: closed in its handshake to make room for a "
                    + "new connection from {} ({})", evicted.id(), evicted.peer(), c.peer(), reason.replace('_', ' '));
            evicted.closeChannel();
        }
        return true;
    }

    /**
     * {@code c} finished its handshake and enters transmission. One let in over a limit on probation now takes the
     * slot of the longest-idle connection of its address (per-address limit) or of the address holding the most
     * (global limit), unless the limit no longer binds; false when no connection is idle now ({@code c} must close).
     */
    boolean enterTransmission(Connection c) {
        Connection evicted;
        String reason;
        synchronized (slots) {
            reason = probation.remove(c);
            if (reason == null || !connections.contains(c)) {
                return true;
            }
            boolean over = reason.equals("peer_limit")
                    ? perPeer.getOrDefault(c.peerAddress(), 0) > config.maxConnectionsPerPeer()
                    : connections.size() > config.maxConnections();
            if (!over) {
                return true;
            }
            evicted = longestIdle(reason.equals("peer_limit") ? c.peerAddress() : busiestPeer(), c);
            if (evicted == null || !evicted.decideToClose("closed while idle to make room for a new connection ("
                    + reason.replace('_', ' ') + ")")) {
                config.metrics().connectionRefused(reason);
                limitedLog.warn(reason, "refusing connection {} from {} at the end of its handshake: {}", c.id(),
                        c.peer(), "no connection is idle to make room for it (" + reason.replace('_', ' ') + ")");
                release(c);
                return false;
            }
            release(evicted);
        }
        config.metrics().connectionClosed("idle_evicted");
        limitedLog.warn("idle_evicted", "connection {} from {}: closed, idle, to make room for connection {} from {}"
                + " ({})", evicted.id(), evicted.peer(), c.id(), c.peer(), reason.replace('_', ' '));
        evicted.closeChannel();
        return true;
    }

    /** The address with the most connections; guarded by {@link #slots}. */
    private String busiestPeer() {
        return perPeer.entrySet().stream().max(Map.Entry.comparingByValue()).map(Map.Entry::getKey).orElse("");
    }

    /**
     * Connections let in over the limits on probation at once, at most: past it the oldest of them (still in its
     * handshake) makes way for a newcomer, so a flood that never finishes its handshakes holds no more than this over
     * the limit, and costs no session its slot.
     */
    private int maxProbation() {
        return Math.max(4, config.maxConnections() / 16);
    }

    /** The connection on probation accepted first (still in its handshake), or null; guarded by {@link #slots}. */
    private Connection oldestOnProbation() {
        Connection best = null;
        for (Connection x : probation.keySet()) {
            if (!x.closing() && !x.inTransmission() && (best == null || x.acceptedNanos() - best.acceptedNanos() < 0)) {
                best = x;
            }
        }
        return best;
    }

    /** The oldest connection of {@code peerAddress} still in its handshake, or null. */
    private Connection oldestHandshake(String peerAddress) {
        Connection best = null;
        for (Connection x : connections) {
            if (x.peerAddress().equals(peerAddress) && !x.closing() && !x.inTransmission()
                    && (best == null || x.acceptedNanos() - best.acceptedNanos() < 0)) {
                best = x;
            }
        }
        return best;
    }

    /**
     * The session of {@code peerAddress} (in transmission, not {@code except}) idle the longest, for a connection on
     * probation that finished its handshake; null if none is idle.
     */
    private Connection longestIdle(String peerAddress, Connection except) {
        Connection best = null;
        for (Connection x : connections) {
            if (x != except && x.peerAddress().equals(peerAddress) && !x.closing() && x.inTransmission() && x.idle()
                    && (best == null || x.lastActiveNanos() - best.lastActiveNanos() < 0)) {
                best = x;
            }
        }
        return best;
    }

    private void release(Connection c) {
        probation.remove(c);
        if (connections.remove(c)) {
            perPeer.computeIfPresent(c.peerAddress(), (k, n) -> n > 1 ? n - 1 : null);
        }
    }

    private void freeSlot(Connection c) {
        synchronized (slots) {
            release(c);
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

    // --------------------------------------------------------------------------------------------- housekeeping

    /** Closes connections that overstay a time limit, and stalled ones whose memory others wait for. */
    private void housekeeping() {
        try {
            long trimmed = System.nanoTime();
            while (!closing) {
                try {
                    long now = System.nanoTime();
                    sweep(now);
                    if (now - trimmed >= TRIM_NANOS) { // trimming walks the idle buffers: not every tick
                        trimmed = now;
                        bufferPool.trim();
                    }
                } catch (RuntimeException | Error e) {
                    limitedLog.warn("housekeeping", "housekeeping failed; trying again", e);
                }
                sleep(HOUSEKEEPING_MILLIS);
            }
        } finally {
            if (!closing) {
                failures.put("housekeeper", "it stopped, so time limits are no longer enforced");
            }
        }
    }

    private void sweep(long now) {
        PayloadBudget.Pressure pressure = payloadBudget.pressure();
        Connection mostHeldStalled = null;
        long mostHeld = 0;
        long grace = config.stalledGrace().toNanos();
        for (Connection c : connections) {
            if (c.closing()) {
                continue;
            }
            if (!c.inTransmission()) {
                if (now - c.acceptedNanos() > config.handshakeTimeout().toNanos()) {
                    timeOut(c, "handshake_timeout", "handshake not finished within "
                            + Durations.human(config.handshakeTimeout()));
                }
                continue;
            }
            long partial = c.partialSinceNanos();
            long stalledReplies = c.repliesStalledSinceNanos();
            if (partial != 0 && now - partial > config.requestTimeout().toNanos()) {
                timeOut(c, "request_timeout", "a request did not arrive whole within "
                        + Durations.human(config.requestTimeout()));
                continue;
            }
            if (stalledReplies != 0 && now - stalledReplies > config.replyTimeout().toNanos()) {
                timeOut(c, "reply_timeout", "replies went unread for " + Durations.human(config.replyTimeout()));
                continue;
            }
            boolean stalled = (partial != 0 && now - Math.max(partial, c.lastReadNanos()) > grace)
                    || (stalledReplies != 0 && now - stalledReplies > grace);
            long held = stalled && pressure.wouldHelp(c.peerAddress()) ? c.heldBytes() : 0;
            if (held > mostHeld) {
                mostHeld = held;
                mostHeldStalled = c;
            }
        }
        if (mostHeldStalled != null) {
            timeOut(mostHeldStalled, "stalled_evicted", "stalled holding " + mostHeld
                    + " bytes of payload memory that other requests wait for");
        }
    }

    private void timeOut(Connection c, String reason, String why) {
        if (c.decideToClose(why)) {
            config.metrics().connectionClosed(reason);
            limitedLog.warn(reason, "connection {} from {}: {}; closing it", c.id(), c.peer(), why);
            c.closeChannel();
        }
    }

    void logLimited(String kind, String format, Object... args) {
        limitedLog.warn(kind, format, args);
    }

    /** The live figures for metrics. */
    private final class State implements NbdServerState {
        @Override
        public int connections() {
            return connections.size();
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
        freeSlot(c);
    }

    /** The addresses actually bound (TCP port 0 replaced by the port the kernel chose). */
    public List<ListenAddress> addresses() {
        return List.copyOf(bound);
    }

    public int connectionCount() {
        return connections.size();
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
        housekeeper.interrupt();
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
