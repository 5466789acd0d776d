package dev.rbridge.rdma.wire;

import dev.rbridge.rdma.TokenProof;
import dev.rbridge.common.Printable;
import dev.rbridge.common.RateLimitedLog;
import dev.rbridge.rdma.ConnectionGate;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ServerInfo;
import dev.rbridge.rdma.link.Link;
import dev.rbridge.rdma.link.TlsLink;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLException;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The memserver's side of one connection's greeting, for every transport that speaks the control protocol: the hello
 * guard, the version and token checks, the place in the {@link ConnectionGate}, and the counting of peers turned away
 * ({@link RegionService#refused}), so that whatever the transport, a peer is counted once and for the same reason:
 * {@code version} (another protocol version), {@code malformed} (garbage, a malformed greeting, a request before it),
 * {@code hello_timeout}, {@code no_memory}, {@code tls_required} (a client in clear at a TLS memserver), {@code
 * tls_handshake} (a failed TLS handshake: a client certificate missing or not from the CA, no common suite); a wrong
 * token is counted by the service itself ({@code token}). TLS, when the listener has it, is set up here too
 * ({@link #link}), so that it comes before everything else the client says.
 * What peers can make this log is logged at most once per reason every few seconds.
 */
public final class Admission {
    private static final Logger log = LoggerFactory.getLogger(Admission.class);
    private static final RateLimitedLog limited = new RateLimitedLog(log);
    /** How much of a client's name a log line shows (the memserver keeps as much of it). */
    private static final int LOGGED_NAME_BYTES = 128;

    private final RegionService service;
    private final InetSocketAddress remote;
    private final ConnectionGate.Slot slot;
    private final String peer;
    private final SSLContext tls;
    private final boolean tlsVerifyPeer;
    private volatile RegionService.Session session;
    private volatile boolean ended;
    private volatile Future<?> guard;
    /** A connection is turned away once, for one reason, whoever sees it first (the guard, its own thread). */
    private final AtomicBoolean turnedAway = new AtomicBoolean();
    /** Between AUTH and AUTH_PROOF: the client's name and both nonces. The connection's thread's only. */
    private Message.AuthStart started;
    private byte[] serverNonce;

    /** A connection in clear. */
    public Admission(RegionService service, InetSocketAddress remote, ConnectionGate.Slot slot) {
        this(service, remote, slot, null, false);
    }

    /**
     * {@code tls}: the listener's TLS context, or null for connections in clear; {@code tlsVerifyPeer}: clients must
     * present a certificate from its CA.
     */
    public Admission(RegionService service, InetSocketAddress remote, ConnectionGate.Slot slot, SSLContext tls,
            boolean tlsVerifyPeer) {
        this.service = service;
        this.tls = tls;
        this.tlsVerifyPeer = tlsVerifyPeer;
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

    /**
     * The connection's first step, on its own thread under the hello guard: the socket itself, or TLS once the
     * handshake is through. A failed handshake throws; {@link #failed} then counts it and says what to answer.
     */
    public Link link(SocketChannel channel) throws IOException {
        if (tls == null) {
            return Link.plain(channel);
        }
        TlsLink link = TlsLink.server(channel, tls, tlsVerifyPeer);
        log.debug("client {}: {}", peer, link.describe());
        return link;
    }

    /** What a message of a connection's greeting decided. */
    public sealed interface Greeting permits Admitted, Refused, Challenge {}

    /**
     * Admitted: answer with {@link #welcome} once the transport is ready to serve. {@code serverProof} is the
     * memserver's proof for a client that proved the token (AUTH_PROOF), null after a HELLO.
     */
    public record Admitted(RegionService.Session session, long helloId, byte[] serverProof) implements Greeting {
        /** The welcome: HELLO's reply, or AUTH_PROOF's with the memserver's proof. */
        public Message welcome() {
            ServerInfo info = session.serverInfo();
            if (serverProof == null) {
                return ControlDispatcher.welcome(helloId, info);
            }
            return new Message.AuthWelcome(helloId, info.serverId(), info.capacityBytes(), info.freeBytes(),
                    WireBytes.of(serverProof));
        }
    }

    /** Send {@code reply} (the memserver's nonce) and pass the next message to {@link #greet} again. */
    public record Challenge(Message reply) implements Greeting {
    }

    /** Refused: send {@code reply} (null when there is nothing to say: it was evicted meanwhile), then close. */
    public record Refused(Message.Error reply) implements Greeting {
    }

    /**
     * Answers a message of the greeting (the memserver's {@link MessageDecoder} lets nothing else through first): a
     * HELLO of another version is refused with both versions named; a HELLO (the token in clear, from older clients)
     * is admitted or refused by the service; an AUTH is answered with a {@link Challenge}, and the AUTH_PROOF after it
     * admitted or refused (see {@link TokenProof}); an admitted client that lost its place to a newcomer meanwhile is
     * cut off.
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
                if (!h.token().isEmpty()) {
                    limited.warn("plain_token", "client {} ('{}') sent the token in clear (a client older than "
                            + "this memserver): upgrade it", peer, Printable.cut(h.clientName(), LOGGED_NAME_BYTES));
                }
                yield admit(h, new RegionService.Credential.Token(h.token()), h.clientName(), null);
            }
            case Message.AuthStart a -> {
                if (a.clientNonce().length() != TokenProof.NONCE) {
                    turnAway("malformed");
                    yield new Refused(ControlDispatcher.error(a, Status.BAD_REQUEST, "AUTH needs a "
                            + TokenProof.NONCE + "-byte nonce"));
                }
                started = a;
                serverNonce = TokenProof.nonce();
                yield new Challenge(new Message.AuthChallenge(a.id(), WireBytes.of(serverNonce)));
            }
            case Message.AuthProof p -> {
                if (started == null) { // the decoder lets AUTH_PROOF through only after AUTH
                    throw new IllegalStateException("AUTH_PROOF before AUTH");
                }
                byte[] transcript = TokenProof.transcript(started.clientName(),
                        started.clientNonce().toArray(), serverNonce);
                yield admit(p, new RegionService.Credential.Proof(transcript, p.proof().toArray()),
                        started.clientName(), transcript);
            }
            default -> throw new IllegalArgumentException("a greeting is a HELLO, not " + Opcode.name(first.code()));
        };
    }

    private Greeting admit(Message request, RegionService.Credential credential, String clientName,
            byte[] transcript) {
        RegionService.Session s;
        try {
            s = service.open(credential, clientName, remote);
        } catch (RemoteMemoryException e) {
            return new Refused(ControlDispatcher.error(request, e.status(), e.getMessage()));
        }
        session = s; // from here on, however this ends, the session hears of it
        if (!slot.authenticated()) {
            return new Refused(null); // cut off to make room for another peer while its greeting was checked
        }
        byte[] proof = null;
        if (transcript != null) {
            proof = service.proveToken(transcript);
            if (proof == null) {
                proof = new byte[0]; // no token here: nothing to prove, and the client decides what that means
            }
        }
        return new Admitted(s, request.id(), proof);
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
            case TlsLink.PlainPeerException x -> {
                limited.warn("tls_required", "client {} spoke in clear to this memserver, which speaks TLS only; "
                        + "refused", peer);
                turnAway("tls_required");
                return new Message.Error(0, Opcode.HELLO.code(), Status.ACCESS_DENIED.code(), "this memserver "
                        + "speaks TLS only: connect with --tls-certificates DIR (a directory with its CA's ca-cert.pem)");
            }
            case SSLException x when session == null -> {
                limited.warn("tls_handshake", "client {}: TLS handshake failed ({}); refused", peer, x.getMessage());
                turnAway("tls_handshake");
            }
            case SSLException x ->
                    limited.warn("tls_failed", "client {}: TLS failed mid-connection ({}): data altered on"
                            + " the way, or the client failed; disconnected", peer, x.getMessage());
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
