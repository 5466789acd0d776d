package dev.rbridge.rdma;

import dev.rbridge.common.Closeables;
import dev.rbridge.common.RateLimitedLog;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Objects;

/**
 * The accept loop of a memserver's listener, shared by the providers that take clients over TCP sockets: every
 * accepted socket asks the {@link ConnectionGate} for a place under the listen parameters' limits; a refused peer is
 * told why in the transport's own words, an evicted one is cut off, and an admitted one is handed to the transport,
 * which starts its thread. This thread allocates nothing for a connection, so no peer can make it run out of memory,
 * and it survives whatever else goes wrong: it backs off and goes on. Refusals and evictions are counted through
 * {@link RegionService#refused} and logged at most once per reason every few seconds; a listening socket closed under
 * it, or the thread ending, is reported by {@link #problem()}.
 */
public final class GatedAcceptor implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(GatedAcceptor.class);
    private static final RateLimitedLog limited = new RateLimitedLog(log);
    /** Backoff after a failed accept (no file descriptors left, say): starts small, doubles, stays under a second. */
    private static final long BACKOFF_MIN_MILLIS = 5;
    private static final long BACKOFF_MAX_MILLIS = 1000;
    /** Pending connections the kernel holds for this loop. */
    private static final int BACKLOG = 128;

    /** What a provider does with the connections the loop admits. */
    public interface Transport {
        /**
         * Starts serving an admitted connection (its thread, its hello guard), or throws: the loop then closes the
         * socket and the slot, counts it as {@code accept_failed} and goes on.
         */
        void start(SocketChannel channel, InetSocketAddress remote, ConnectionGate.Slot slot) throws IOException;

        /**
         * What a refused peer reads before the close: {@code message} (which limit refused it) in the words of the
         * transport's protocol, as the answer to the greeting it sent or is about to send.
         */
        ByteBuffer refusal(String message);
    }

    private final String name;
    private final ServerSocketChannel server;
    private final InetSocketAddress address;
    private final ConnectionGate gate;
    private final RegionService service;
    private final Transport transport;
    private final Thread thread;
    private volatile boolean closed;
    private volatile String problem;

    private GatedAcceptor(String name, ServerSocketChannel server, ConnectionLimits limits, RegionService service,
            Transport transport) throws IOException {
        this.name = name;
        this.server = server;
        this.address = (InetSocketAddress) server.getLocalAddress();
        this.gate = new ConnectionGate(limits);
        this.service = service;
        this.transport = transport;
        this.thread = new Thread(this::acceptLoop, "rdma-" + name + "-accept-" + address.getPort());
        this.thread.setDaemon(true);
    }

    /** A listening socket on {@code address}, failing with a message that names it. */
    public static ServerSocketChannel bind(InetSocketAddress address) throws IOException {
        ServerSocketChannel ch = ServerSocketChannel.open();
        try {
            ch.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            ch.bind(address, BACKLOG);
            return ch;
        } catch (IOException e) {
            ch.close();
            throw new IOException("cannot listen on " + address.getHostString() + ":" + address.getPort() + ": "
                    + e.getMessage() + (e instanceof java.net.BindException && String.valueOf(e.getMessage())
                            .contains("in use") ? " (another process has the port: stop it, or give --listen another)"
                                    : ""),
                    e);
        }
    }

    /**
     * Starts accepting on {@code server} (from {@link #bind}) for the provider called {@code name} (in thread names and
     * log lines), under {@code limits}.
     */
    public static GatedAcceptor start(String name, ServerSocketChannel server, ConnectionLimits limits,
            RegionService service, Transport transport) throws IOException {
        GatedAcceptor a = new GatedAcceptor(name, server, Objects.requireNonNull(limits), service, transport);
        a.thread.start();
        return a;
    }

    public InetSocketAddress address() {
        return address;
    }

    /** Why this loop takes no new clients (see {@link RemoteListener#problem()}), or null while it does. */
    public String problem() {
        String p = problem;
        if (p == null && !closed && !thread.isAlive()) {
            return "its accept thread ended";
        }
        return p;
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
                        log.error("{} listener at {}: {}; no new clients can connect", name, describe(), problem);
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
                    Closeables.closeQuietly(ch);
                    service.refused("accept_failed", null);
                    limited.info("accept_failed", "could not take a new connection ({}); dropped it", e.toString());
                } catch (Throwable e) { // out of memory or threads: give the process a moment
                    Closeables.closeQuietly(ch);
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
                log.error("{} listener at {}: {}; no new clients can connect", name, describe(), problem);
            }
        }
    }

    /** Admits {@code ch} or turns it away. */
    private void take(SocketChannel ch) throws IOException {
        InetSocketAddress remote = (InetSocketAddress) ch.getRemoteAddress();
        switch (gate.admit(remote.getAddress(), () -> Closeables.closeQuietly(ch))) {
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
                try {
                    transport.start(ch, remote, a.slot());
                } catch (Throwable e) {
                    a.slot().close();
                    throw e;
                }
            }
        }
    }

    /**
     * Tells a refused peer why before closing: it may be an honest client that found the memserver full, and "the
     * connection was closed" would not tell it what to do. A fresh socket's send buffer takes the few bytes at once.
     */
    private void refuse(SocketChannel ch, String why) {
        try {
            ByteBuffer answer = transport.refusal("the memserver takes no more connections now: " + why);
            ch.configureBlocking(false);
            ch.write(answer);
            ch.shutdownOutput();
            // Unread input makes the close a reset, which may destroy the answer before the peer reads it.
            ByteBuffer discard = ByteBuffer.allocate(4096);
            for (int i = 0; i < 4 && ch.read(discard.clear()) > 0; i++) {
                // its greeting, most likely
            }
        } catch (IOException e) {
            log.debug("could not tell a refused peer why: {}", e.toString());
        } finally {
            Closeables.closeQuietly(ch);
        }
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

    /** Stops accepting; the connections it handed out are the transport's to close. */
    @Override
    public void close() {
        closed = true;
        try {
            server.close();
        } catch (IOException e) {
            log.debug("close failed", e);
        }
    }
}
