package dev.rbridge.rdma.wire;

import dev.rbridge.rdma.TokenProof;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ServerInfo;
import dev.rbridge.rdma.ServerState;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ByteChannel;
import java.nio.channels.SocketChannel;
import java.net.InetSocketAddress;
import javax.net.ssl.SSLContext;
import dev.rbridge.rdma.link.Link;
import dev.rbridge.rdma.link.TlsLink;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongFunction;
import java.util.function.Predicate;

/**
 * The client's side of the control protocol, for every transport that speaks it: the greeting, request ids, the calls
 * waiting for their replies, and how a reply becomes a call's result, or its {@link RemoteMemoryException}. The
 * transport writes requests and reads replies; this decides what they mean.
 *
 * <p>Each control operation of {@link dev.rbridge.rdma.RemoteConnection} is an {@link Operation}: the request it
 * sends and how its reply becomes the result, so both transports send the same bytes and read them the same way.
 */
public final class ControlClient {
    private final String peer;
    private final AtomicLong ids = new AtomicLong(1);
    private final Map<Long, Call> pending = new ConcurrentHashMap<>();
    /** Set once, when the connection closes: calls registered later fail with it at once. */
    private volatile RemoteMemoryException closed;

    /** {@code peer}: the memserver as errors name it, address and port. */
    public ControlClient(String peer) {
        this.peer = peer;
    }

    public String peer() {
        return peer;
    }

    /** How a reply (already checked: no error, the right opcode) becomes a call's result. */
    @FunctionalInterface
    public interface Result {
        Object of(Message reply);
    }

    /** The result of operations that return nothing (WRITE, ZERO, FLUSH, RELEASE, ...). */
    public static final Result NOTHING = reply -> null;

    /**
     * A request waiting for its reply, or, on a transport that moves data elsewhere, any operation waiting to
     * complete (its watchdog and its close treat them alike). A transport may extend it with what its data path needs.
     */
    public static class Call {
        private final long id;
        private final int code;
        private final long deadline;
        private final CompletableFuture<Object> future;
        private final Result result;

        /**
         * @param code     the request's opcode
         * @param deadline {@link System#nanoTime()} after which the watchdog declares the memserver dead
         */
        public Call(long id, int code, long deadline, CompletableFuture<Object> future, Result result) {
            this.id = id;
            this.code = code;
            this.deadline = deadline;
            this.future = future;
            this.result = result;
        }

        public final long id() {
            return id;
        }

        public final int code() {
            return code;
        }

        public final long deadline() {
            return deadline;
        }

        public final CompletableFuture<Object> future() {
            return future;
        }

        /** What errors call it: the opcode's name. */
        public String what() {
            return Opcode.name(code);
        }
    }

    /** A new request id. */
    public long nextId() {
        return ids.getAndIncrement();
    }

    /** Request ids handed out so far: a count that moves whenever a request is issued. */
    public long issued() {
        return ids.get();
    }

    /**
     * Makes {@code c} wait for its reply; false when the connection has closed (before or meanwhile): {@code c} has
     * then failed with the cause, and must not be sent.
     */
    public boolean register(Call c) {
        pending.put(c.id(), c);
        RemoteMemoryException dead = closed;
        if (dead != null && pending.remove(c.id()) != null) {
            c.future().completeExceptionally(dead);
            return false;
        }
        return true;
    }

    /**
     * The call waiting for the reply with this id, still waiting; null when there is none. A transport checks that a
     * reply fits its call before it takes the call ({@link #remove}): a reply that does not closes the connection, and
     * the close fails every call still waiting, this one included.
     */
    public Call waiting(long id) {
        return pending.get(id);
    }

    /**
     * Takes {@code c} off the waiting calls, to answer it with its reply or to complete it some other way; true if it
     * was still waiting (false: the close failed it meanwhile).
     */
    public boolean remove(Call c) {
        return pending.remove(c.id(), c);
    }

    /** No call is waiting. */
    public boolean idle() {
        return pending.isEmpty();
    }

    /**
     * Completes {@code c} with its reply: an error reply fails it with the status and the memserver's reason (an
     * opcode the memserver predates says so); a reply that cannot be read, or to another opcode, fails it with
     * {@code INTERNAL}; otherwise the result.
     */
    public void answer(Call c, Message reply) {
        switch (reply) {
            case Message.Error e -> c.future().completeExceptionally(failure(c, e));
            case Message.Unreadable u -> c.future().completeExceptionally(new RemoteMemoryException(Status.INTERNAL,
                    "malformed " + c.what() + " reply from memserver " + peer + ": " + u.reason()));
            default -> {
                if (reply.code() != c.code()) {
                    c.future().completeExceptionally(new RemoteMemoryException(Status.INTERNAL, "memserver " + peer
                            + " answered " + c.what() + " with a " + Opcode.name(reply.code()) + " reply"));
                    return;
                }
                Object value;
                try {
                    value = c.result.of(reply);
                } catch (RuntimeException e) {
                    c.future().completeExceptionally(new RemoteMemoryException(Status.INTERNAL, "malformed "
                            + c.what() + " reply from memserver " + peer + ": " + e));
                    return;
                }
                c.future().complete(value);
            }
        }
    }

    /** The exception an error reply to {@code c} means. */
    public RemoteMemoryException failure(Call c, Message.Error e) {
        String message = e.message();
        if (e.status() == Status.BAD_REQUEST.code() && message.startsWith("unexpected OP_")) {
            message += " (the memserver predates this operation; upgrade it)";
        }
        return new RemoteMemoryException(Status.of(e.status()), c.what() + " on memserver " + peer + " failed: "
                + message);
    }

    /** A call older than its deadline at {@code now}, or null. */
    public Call overdue(long now) {
        for (Call c : pending.values()) {
            if (now - c.deadline() > 0) {
                return c;
            }
        }
        return null;
    }

    /** The watchdog's verdict on an overdue call. */
    public RemoteMemoryException timeout(Call c, long timeoutNanos) {
        return new RemoteMemoryException(Status.TIMEOUT, "memserver " + peer + " did not answer " + c.what()
                + " within " + TimeUnit.NANOSECONDS.toMillis(timeoutNanos) + " ms; connection declared dead");
    }

    /**
     * The connection closed with {@code cause}: every waiting call fails with it, and so does every call registered
     * from now on. Returns how many failed.
     */
    public int failAll(RemoteMemoryException cause) {
        return failAllBut(cause, c -> false);
    }

    /**
     * As {@link #failAll}, except the calls {@code held} says something still holds (an RDMA operation whose buffer
     * the NIC may still read or write): they stay waiting until a later {@link #failAll}, or their completion.
     */
    public int failAllBut(RemoteMemoryException cause, Predicate<Call> held) {
        if (closed == null) {
            closed = cause;
        }
        int failed = 0;
        for (Call c : List.copyOf(pending.values())) {
            if (!held.test(c) && pending.remove(c.id(), c)) {
                c.future().completeExceptionally(cause);
                failed++;
            }
        }
        return failed;
    }

    /** How many calls are waiting. */
    public int waitingCount() {
        return pending.size();
    }

    // ------------------------------------------------------------------------------------------- operations

    /** A control operation: its request, given the id, and how its reply becomes the result. */
    public record Operation<T>(LongFunction<Message> request, Result result) {
    }

    public static Operation<RegionDescriptor> allocate(RegionTag tag, long length) {
        return new Operation<>(id -> new Message.Allocate(id, length, tag),
                r -> ((Message.AllocateReply) r).region());
    }

    public static Operation<RegionDescriptor> open(long regionId) {
        return new Operation<>(id -> new Message.Open(id, regionId), r -> ((Message.OpenReply) r).region());
    }

    public static Operation<List<RegionInfo>> list() {
        return new Operation<>(Message.ListRegions::new, r -> ((Message.ListReply) r).regions());
    }

    public static Operation<Void> release(RegionDescriptor region) {
        return new Operation<>(id -> new Message.Release(id, region.id(), region.key()), NOTHING);
    }

    public static Operation<RegionDescriptor> retag(RegionDescriptor region, RegionTag tag) {
        return new Operation<>(id -> new Message.Retag(id, region.id(), region.key(), tag),
                r -> ((Message.RetagReply) r).region());
    }

    public static Operation<Lease> lease(String volume, String owner, Duration ttl) {
        return lease(volume, owner, ttl, Lease.NO_ID);
    }

    /** {@code leaseId}: the id of this client's last grant of the volume there, or {@link Lease#NO_ID}. */
    public static Operation<Lease> lease(String volume, String owner, Duration ttl, long leaseId) {
        long ttlMillis = leaseMillis(ttl);
        return new Operation<>(id -> new Message.Lease(id, volume, owner, ttlMillis, leaseId), r -> {
            Message.LeaseReply l = (Message.LeaseReply) r;
            return new Lease(volume, owner, l.ttlMillis(), l.tookOver(), l.ownerChanges(), l.epoch(), l.leaseId(),
                    l.continued());
        });
    }

    /**
     * A ttl in whole milliseconds as the wire carries it: a positive one below a millisecond counts as one, a huge one
     * saturates, and zero or a negative one goes as 0 or -1 for the memserver to refuse.
     */
    static long leaseMillis(Duration ttl) {
        if (ttl.isNegative() || ttl.isZero()) {
            return ttl.isZero() ? 0 : -1;
        }
        try {
            return Math.max(1, ttl.toMillis());
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE;
        }
    }

    public static Operation<Void> unlease(String volume, String owner) {
        return unlease(volume, owner, Lease.NO_ID);
    }

    public static Operation<Void> unlease(String volume, String owner, long leaseId) {
        return new Operation<>(id -> new Message.Unlease(id, volume, owner, leaseId), NOTHING);
    }

    public static Operation<ServerInfo> info() {
        return new Operation<>(Message.Info::new, r -> {
            Message.InfoReply i = (Message.InfoReply) r;
            return new ServerInfo(i.serverId(), Protocol.VERSION, i.capacityBytes(), i.freeBytes());
        });
    }

    public static Operation<ServerState> state() {
        return new Operation<>(Message.State::new,
                r -> new ServerState((((Message.StateReply) r).flags() & Protocol.STATE_DRAINING) != 0));
    }

    /**
     * {@code asked}, with a memserver's "unexpected OP_10" (it predates STATE) read as {@link ServerState#SERVING}:
     * such a memserver cannot be draining in a way a client needs to act on (it has nothing to report).
     */
    public static CompletableFuture<ServerState> predatesAsServing(CompletableFuture<ServerState> asked) {
        return asked.exceptionallyCompose(e -> {
            Throwable c = e instanceof java.util.concurrent.CompletionException && e.getCause() != null
                    ? e.getCause()
                    : e;
            if (c instanceof RemoteMemoryException r && r.status() == Status.BAD_REQUEST
                    && r.getMessage().contains("unexpected OP_" + Opcode.STATE.code())) {
                return CompletableFuture.completedFuture(ServerState.SERVING);
            }
            return CompletableFuture.failedFuture(c);
        });
    }

    public static Operation<Void> zero(RegionDescriptor region, long offset, long length) {
        return new Operation<>(id -> new Message.Zero(id, region.id(), region.key(), offset, length), NOTHING);
    }

    public static Operation<Void> flush() {
        return new Operation<>(Message.Flush::new, NOTHING);
    }

    // ------------------------------------------------------------------------------------------- greeting

    /**
     * The connection's byte stream to {@code address} ({@link Link#client}): a memserver that answered a TLS client in
     * clear either refused it before any TLS (the connection gate: its refusal is the exception, as after a HELLO) or
     * does not run TLS (an IOException saying so).
     */
    public static Link link(SocketChannel ch, SSLContext tls, InetSocketAddress address, String peer)
            throws IOException, RemoteMemoryException {
        try {
            return Link.client(ch, tls, address);
        } catch (TlsLink.PlainPeerException e) {
            ByteBuffer clear = e.received().order(ByteOrder.LITTLE_ENDIAN);
            try {
                // BAD_REQUEST is a memserver without TLS that took our TLS greeting for a malformed message.
                if (MessageDecoder.forClient().next(clear) instanceof Message.Error refusal
                        && Status.of(refusal.status()) != Status.BAD_REQUEST) {
                    throw new RemoteMemoryException(Status.of(refusal.status()), "memserver " + peer
                            + " refused the connection: " + refusal.message());
                }
            } catch (MalformedMessageException | RuntimeException ignored) {
                // not a whole message of the wire: a memserver without TLS answering the TLS greeting
            }
            throw new IOException("it answered in clear: the memserver does not run TLS (start it with "
                    + "--tls-certificates DIR, or connect without TLS)", e);
        }
    }

    /**
     * The greeting on a connected, blocking channel, before anything reads it otherwise, and what the memserver says
     * about itself. With a token, the token never leaves this process: AUTH and AUTH_PROOF prove it, and the memserver
     * must prove it too ({@link TokenProof}); a memserver that cannot (it has no token, or another, or is not a
     * memserver) is refused here. Without one, HELLO with an empty token. A refusal (wrong token, no place, draining)
     * or a memserver of another protocol version is the exception; a peer that answers with something else is no
     * memserver ({@code IOException}).
     */
    public static ServerInfo greet(ByteChannel ch, String peer, String token, String clientName)
            throws IOException, RemoteMemoryException {
        if (token != null && !token.isEmpty()) {
            return authenticate(ch, peer, token, clientName);
        }
        return switch (exchange(ch, peer, new Message.Hello(0, "", clientName))) {
            case Message.HelloReply h -> new ServerInfo(h.serverId(), Protocol.VERSION, h.capacityBytes(),
                    h.freeBytes());
            case Message.OtherVersion v -> throw new RemoteMemoryException(Status.VERSION_MISMATCH, "memserver "
                    + peer + " speaks protocol v" + v.version() + ", this client v" + Protocol.VERSION);
            case Message.Error e when Status.of(e.status()) == Status.AUTH_FAILED -> throw new RemoteMemoryException(
                    Status.AUTH_FAILED, "memserver " + peer + " needs a token and none was given: add --token-file"
                            + " FILE (or set RBRIDGE_TOKEN) with the memserver's token");
            case Message.Error e -> throw new RemoteMemoryException(Status.of(e.status()), "memserver " + peer
                    + " refused the connection: " + e.message());
            case Message other -> throw new IOException(peer + " sent a malformed hello reply (" + describe(other)
                    + ")");
        };
    }

    private static ServerInfo authenticate(ByteChannel ch, String peer, String token, String clientName)
            throws IOException, RemoteMemoryException {
        byte[] clientNonce = TokenProof.nonce();
        byte[] serverNonce = switch (exchange(ch, peer, new Message.AuthStart(0, clientName,
                WireBytes.of(clientNonce)))) {
            case Message.AuthChallenge c -> c.serverNonce().toArray();
            case Message.OtherVersion v -> throw new RemoteMemoryException(Status.VERSION_MISMATCH, "memserver "
                    + peer + " speaks protocol v" + v.version() + ", this client v" + Protocol.VERSION);
            case Message.Error e when e.message().contains("OP_" + Opcode.AUTH.code()) ->
                    throw new RemoteMemoryException(Status.VERSION_MISMATCH, "memserver " + peer + " predates "
                            + "token proofs (it wants the token sent in clear, which this client never does): "
                            + "upgrade the memservers before the bridges");
            case Message.Error e -> throw new RemoteMemoryException(Status.of(e.status()), "memserver " + peer
                    + " refused the connection: " + e.message());
            case Message other -> throw new IOException(peer + " sent a malformed AUTH reply (" + describe(other)
                    + ")");
        };
        if (serverNonce.length != TokenProof.NONCE) {
            throw new IOException(peer + " sent a nonce of " + serverNonce.length + " bytes");
        }
        byte[] transcript = TokenProof.transcript(clientName, clientNonce, serverNonce);
        return switch (exchange(ch, peer, new Message.AuthProof(0, WireBytes.of(TokenProof.client(token,
                transcript))))) {
            case Message.AuthWelcome w -> {
                if (!TokenProof.matches(TokenProof.server(token, transcript), w.serverProof().toArray())) {
                    throw new RemoteMemoryException(Status.AUTH_FAILED, "memserver " + peer + " admitted this "
                            + "client but could not prove it knows the token (it runs without one, or with another):"
                            + " not using it");
                }
                yield new ServerInfo(w.serverId(), Protocol.VERSION, w.capacityBytes(), w.freeBytes());
            }
            case Message.Error e -> throw new RemoteMemoryException(Status.of(e.status()), "memserver " + peer
                    + " refused the connection: " + e.message());
            case Message other -> throw new IOException(peer + " sent a malformed AUTH_PROOF reply ("
                    + describe(other) + ")");
        };
    }

    /**
     * How errors name a reply that is not the one expected: its opcode, or why it could not be read. Never the record
     * itself, whose fields are the peer's to choose.
     */
    public static String describe(Message reply) {
        return reply instanceof Message.Unreadable u ? u.reason() : "a reply of opcode " + Opcode.name(reply.code());
    }

    /**
     * Writes one request and reads its reply on a blocking channel no other thread reads yet (the greeting, and what
     * a transport asks right after it). Reads no further than the reply, so what comes next is left for the reader.
     */
    public static Message exchange(ByteChannel ch, String peer, Message request) throws IOException {
        ByteBuffer out = MessageEncoder.encode(request);
        while (out.hasRemaining()) {
            ch.write(out);
        }
        MessageDecoder decoder = MessageDecoder.forClient();
        ByteBuffer header = ByteBuffer.allocate(Protocol.HEADER).order(ByteOrder.LITTLE_ENDIAN);
        ByteBuffer body = null;
        while (true) {
            ByteBuffer in = body == null ? header : body;
            if (in.hasRemaining() && ch.read(in) < 0) {
                throw new EOFException(peer + " closed the connection");
            }
            if (in.hasRemaining()) {
                continue;
            }
            Message m;
            try {
                m = decoder.next(in.flip());
            } catch (MalformedMessageException e) {
                throw new IOException(e.getMessage().startsWith("bad magic") ? peer + " is not a memserver (bad "
                        + "magic in its reply)" : peer + " sent a malformed reply: " + e.getMessage());
            }
            if (m != null) {
                if (decoder.payloadRemaining() > 0) {
                    throw new IOException(peer + " sent data in reply to " + Opcode.name(request.code()));
                }
                return m;
            }
            // The header is in: the body, whose length the decoder checked against its limits, comes next.
            int length = header.getInt(20);
            if (length > Protocol.MAX_CONTROL_BODY) {
                throw new IOException(peer + " sent a reply of " + length + " bytes to "
                        + Opcode.name(request.code()));
            }
            body = ByteBuffer.allocate(length).order(ByteOrder.LITTLE_ENDIAN);
        }
    }
}
