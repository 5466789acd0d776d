package dev.rbridge.rdma.wire;

import dev.rbridge.common.RateLimitedLog;
import dev.rbridge.rdma.ConnectionGate;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The memserver's side of one connection's greeting, for every transport that speaks the control protocol: the hello
 * guard, the version and token checks, the place in the {@link ConnectionGate}, and the counting of peers turned away
 * ({@link RegionService#refused}), so that whatever the transport, a peer is counted once and for the same reason:
 * {@code version} (another protocol version), {@code malformed} (garbage, a malformed greeting, a request before it),
 * {@code hello_timeout}, {@code no_memory}; a wrong token is counted by the service itself ({@code token}).
 * What peers can make this log is logged at most once per reason every few seconds.
 */
public final class Admission {
    private static final Logger log = LoggerFactory.getLogger(Admission.class);
    private static final RateLimitedLog limited = new RateLimitedLog(log);

    private final RegionService service;
    private final InetSocketAddress remote;
    private final ConnectionGate.Slot slot;
    private final String peer;
    private volatile RegionService.Session session;
    private volatile boolean ended;
    private volatile Future<?> guard;
    /** A connection is turned away once, for one reason, whoever sees it first (the guard, its own thread). */
    private final AtomicBoolean turnedAway = new AtomicBoolean();

    public Admission(RegionService service, InetSocketAddress remote, ConnectionGate.Slot slot) {
        this.service = service;
        this.remote = remote;
        this.slot = slot;
        this.peer = remote.getAddress().getHostAddress() + ":" + remote.getPort();
    }

    /** The peer as logs name it: address and port. */
    public String peer() {
        return peer;
    }

    /** The admitted client's session, or null before (or without) admission. */
    public RegionService.Session session() {
        return session;
    }

    /**
     * Starts the hello guard: a peer that has not been admitted within {@code timeoutMillis} is counted as {@code
     * hello_timeout} and cut off with {@code close}. Cancelled when the connection ends ({@link #closed}), so the timer
     * lets go of it at once.
     */
    public void guard(ScheduledExecutorService timer, long timeoutMillis, Runnable close) {
        Future<?> g = timer.schedule(() -> {
            if (session == null && !ended) {
                limited.info("hello_timeout", "client {} did not say hello within {} ms; disconnected", peer,
                        timeoutMillis);
                turnAway("hello_timeout");
                close.run();
            }
        }, timeoutMillis, TimeUnit.MILLISECONDS);
        guard = g;
        if (ended) {
            g.cancel(false);
        }
    }

    /** What the first message of a connection decided. */
    public sealed interface Greeting permits Admitted, Refused {
    }

    /** Admitted: answer with {@link ControlDispatcher#welcome} once the transport is ready to serve. */
    public record Admitted(RegionService.Session session, long helloId) implements Greeting {
    }

    /** Refused: send {@code reply} (null when there is nothing to say: it was evicted meanwhile), then close. */
    public record Refused(Message.Error reply) implements Greeting {
    }

    /**
     * Answers the greeting, the first message of the connection (the memserver's {@link MessageDecoder} lets nothing
     * else through first): a HELLO of another version is refused with both versions named, a HELLO is admitted or
     * refused by the service (the token), and an admitted client that lost its place to a newcomer meanwhile is cut
     * off.
     */
    public Greeting greet(Message first) {
        return switch (first) {
            case Message.OtherVersion v -> {
                limited.warn("version", "client {} speaks protocol v{}, this memserver v{}; refused", peer,
                        v.version(), Protocol.VERSION);
                turnAway("version");
                yield new Refused(ControlDispatcher.error(v, Status.VERSION_MISMATCH, "this memserver speaks protocol v"
                        + Protocol.VERSION + ", the client v" + v.version() + "; upgrade the older side"));
            }
            case Message.Hello h -> {
                RegionService.Session s;
                try {
                    s = service.open(h.token(), h.clientName(), remote);
                } catch (RemoteMemoryException e) {
                    yield new Refused(ControlDispatcher.error(h, e.status(), e.getMessage()));
                }
                session = s; // from here on, however this ends, the session hears of it
                if (!slot.authenticated()) {
                    yield new Refused(null); // cut off to make room for another peer while its greeting was checked
                }
                yield new Admitted(s, h.id());
            }
            default -> throw new IllegalArgumentException("a greeting is a HELLO, not " + Opcode.name(first.code()));
        };
    }

    /**
     * The admitted client cannot have the buffers a served connection needs: counted as {@code no_memory}; the reply
     * to send before closing.
     */
    public Message.Error noMemory(long helloId, OutOfMemoryError e) {
        limited.error("no_memory", "client {}: no memory for its buffers ({}); disconnected", peer, e.toString());
        turnAway("no_memory");
        return new Message.Error(helloId, Opcode.HELLO.code(), Status.NO_CAPACITY.code(),
                "the memserver has no memory for another connection now; try again later");
    }

    /**
     * What a peer the {@link ConnectionGate} turned away reads before the close, whatever it sent: the answer to a
     * greeting, failed with {@code NO_CAPACITY} and {@code message} (which limit refused it).
     */
    public static ByteBuffer refusal(String message) {
        return MessageEncoder.encode(new Message.Error(0, Opcode.HELLO.code(), Status.NO_CAPACITY.code(), message));
    }

    /**
     * The connection's thread ended with {@code e}: logs it as what it is, counts a peer turned away before its
     * admission, and returns what to tell the peer before closing (a malformed message's error), or null.
     */
    public Message.Error failed(Throwable e) {
        switch (e) {
            case EOFException x -> log.debug("client {} disconnected", peer);
            case ClosedChannelException x -> log.debug("client {} disconnected", peer);
            case MalformedMessageException m -> {
                limited.warn("malformed", "client {} sent a malformed message ({}); closing its connection", peer,
                        m.getMessage());
                if (session == null) {
                    turnAway("malformed");
                }
                return new Message.Error(0, 0, Status.BAD_REQUEST.code(), "malformed message: " + m.getMessage());
            }
            case IOException x -> log.debug("client {}: {}", peer, x.getMessage());
            case OutOfMemoryError x -> {
                // Only this connection's own buffers are made by its thread; the memserver goes on without it.
                limited.error("no_memory", "client {}: no memory for its buffers ({}); disconnected", peer,
                        x.toString());
                if (session == null) {
                    turnAway("no_memory");
                }
            }
            default -> limited.error("internal", "client {}: internal error", peer, e);
        }
        return null;
    }

    private void turnAway(String reason) {
        if (turnedAway.compareAndSet(false, true)) {
            service.refused(reason, remote);
        }
    }

    /** The connection ended (either side): the guard is cancelled, its place is free, its session told. */
    public void closed() {
        ended = true;
        Future<?> g = guard;
        if (g != null) {
            g.cancel(false);
        }
        slot.close();
        RegionService.Session s = session;
        if (s != null) {
            s.closed();
        }
    }
}
