package dev.rbridge.rdma.wire;

import dev.rbridge.rdma.TokenProof;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ServerInfo;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The client side of the control protocol: what replies mean, the calls table, the greeting on a real socket. */
@Timeout(30)
class ControlClientTest {
    static final RegionTag TAG = new RegionTag("vol", 1, 2, 3);
    final ControlClient client = new ControlClient("10.0.0.9:7471");

    <T> ControlClient.Call call(ControlClient.Operation<T> op) {
        Message request = op.request().apply(client.nextId());
        ControlClient.Call c = new ControlClient.Call(request.id(), request.code(), System.nanoTime() + 1_000_000_000L,
                new CompletableFuture<>(), op.result());
        assertTrue(client.register(c));
        return c;
    }

    /** {@code c}, found waiting for its reply by id and then taken, as a transport does once the reply fits it. */
    ControlClient.Call taken(ControlClient.Call c) {
        assertSame(c, client.waiting(c.id()));
        assertTrue(client.remove(c));
        assertNull(client.waiting(c.id()));
        return c;
    }

    static RemoteMemoryException failure(ControlClient.Call c) {
        ExecutionException e = assertThrows(ExecutionException.class, () -> c.future().get());
        return assertInstanceOf(RemoteMemoryException.class, e.getCause());
    }

    @Test
    void repliesBecomeTheOperationsResults() throws Exception {
        RegionDescriptor d = new RegionDescriptor(7, 4096, 99, TAG);
        ControlClient.Call allocate = call(ControlClient.allocate(TAG, 4096));
        client.answer(taken(allocate), new Message.AllocateReply(allocate.id(), d));
        assertEquals(d, allocate.future().get());

        ControlClient.Call lease = call(ControlClient.lease("vol", "owner-a", Duration.ofSeconds(5)));
        client.answer(taken(lease), new Message.LeaseReply(lease.id(), 5000, true));
        assertEquals(new Lease("vol", "owner-a", 5000, true), lease.future().get());

        ControlClient.Call info = call(ControlClient.info());
        client.answer(taken(info), new Message.InfoReply(info.id(), "srv", 100, 40));
        assertEquals(new ServerInfo("srv", Protocol.VERSION, 100, 40), info.future().get());

        ControlClient.Call draining = call(ControlClient.state());
        client.answer(taken(draining), new Message.StateReply(draining.id(), Protocol.STATE_DRAINING | 0x80));
        assertEquals(new dev.rbridge.rdma.ServerState(true), draining.future().get());
        ControlClient.Call serving = call(ControlClient.state());
        client.answer(taken(serving), new Message.StateReply(serving.id(), 0));
        assertEquals(dev.rbridge.rdma.ServerState.SERVING, serving.future().get());

        List<RegionInfo> listed = List.of(new RegionInfo(new RegionDescriptor(7, 4096, 0, TAG), "bridge"));
        ControlClient.Call list = call(ControlClient.list());
        client.answer(taken(list), new Message.ListReply(list.id(), listed));
        assertEquals(listed, list.future().get());

        ControlClient.Call release = call(ControlClient.release(d));
        client.answer(taken(release), new Message.ReleaseReply(release.id()));
        assertNull(release.future().get());
        assertTrue(client.idle());
    }

    @Test
    void anErrorReplyFailsTheCallWithItsStatusAndAnOpcodeTheMemserverPredatesSaysSo() throws Exception {
        ControlClient.Call open = call(ControlClient.open(7));
        client.answer(taken(open), new Message.Error(open.id(), Opcode.OPEN.code(),
                Status.ACCESS_DENIED.code(), "volume 'vol' is leased by another client"));
        RemoteMemoryException e = failure(open);
        assertEquals(Status.ACCESS_DENIED, e.status());
        assertEquals("OPEN on memserver 10.0.0.9:7471 failed: volume 'vol' is leased by another client",
                e.getMessage());

        ControlClient.Call lease = call(ControlClient.lease("vol", "o", Duration.ofSeconds(1)));
        client.answer(taken(lease), new Message.Error(lease.id(), Opcode.LEASE.code(),
                Status.BAD_REQUEST.code(), "unexpected OP_7"));
        e = failure(lease);
        assertEquals(Status.BAD_REQUEST, e.status());
        assertTrue(e.getMessage().endsWith("unexpected OP_7 (the memserver predates this operation; upgrade it)"),
                e.getMessage());

        // A memserver that predates STATE has nothing to report: serving. Other refusals stay failures.
        ControlClient.Call state = call(ControlClient.state());
        client.answer(taken(state), new Message.Error(state.id(), Opcode.STATE.code(), Status.BAD_REQUEST.code(),
                "unexpected OP_10"));
        assertEquals(dev.rbridge.rdma.ServerState.SERVING,
                ControlClient.predatesAsServing(state.future().thenApply(x -> (dev.rbridge.rdma.ServerState) x)).get());
        ControlClient.Call refused = call(ControlClient.state());
        client.answer(taken(refused), new Message.Error(refused.id(), Opcode.STATE.code(), Status.INTERNAL.code(),
                "broken"));
        assertThrows(java.util.concurrent.ExecutionException.class, () -> ControlClient.predatesAsServing(
                refused.future().thenApply(x -> (dev.rbridge.rdma.ServerState) x)).get());
    }

    @Test
    void anUnreadableReplyOrOneToAnotherOpcodeFailsOnlyItsCall() {
        ControlClient.Call open = call(ControlClient.open(7));
        client.answer(taken(open), new Message.Unreadable(open.id(), Opcode.OPEN.code(), "truncated"));
        assertEquals(Status.INTERNAL, failure(open).status());
        ControlClient.Call info = call(ControlClient.info());
        client.answer(taken(info), new Message.FlushReply(info.id()));
        RemoteMemoryException e = failure(info);
        assertEquals(Status.INTERNAL, e.status());
        assertTrue(e.getMessage().contains("answered INFO with a FLUSH reply"), e.getMessage());
    }

    @Test
    void aClosedClientFailsWaitingCallsAndEveryLaterOne() {
        ControlClient.Call waiting = call(ControlClient.flush());
        RemoteMemoryException cause = new RemoteMemoryException(Status.CONNECTION_LOST, "gone");
        assertEquals(1, client.failAll(cause));
        assertSame(cause, failure(waiting));
        ControlClient.Call later = new ControlClient.Call(client.nextId(), Opcode.FLUSH.code(), 0,
                new CompletableFuture<>(), ControlClient.NOTHING);
        assertFalse(client.register(later), "a call registered after the close must not be sent");
        assertSame(cause, failure(later));
    }

    @Test
    void aHelloShownInALogOrAnErrorWithholdsItsToken() {
        String shown = new Message.Hello(7, "SUPER-SECRET-TOKEN", "probe").toString();
        assertFalse(shown.contains("SUPER-SECRET-TOKEN"), shown);
        assertTrue(shown.contains("probe"), shown);
    }

    @Test
    void theWatchdogFindsTheOverdueCallAndNamesIt() {
        long now = System.nanoTime();
        ControlClient.Call late = new ControlClient.Call(client.nextId(), Opcode.READ.code(), now - 1,
                new CompletableFuture<>(), ControlClient.NOTHING);
        client.register(new ControlClient.Call(client.nextId(), Opcode.FLUSH.code(), now + 1_000_000_000L,
                new CompletableFuture<>(), ControlClient.NOTHING));
        assertNull(client.overdue(now));
        client.register(late);
        assertSame(late, client.overdue(now));
        RemoteMemoryException e = client.timeout(late, 2_000_000_000L);
        assertEquals(Status.TIMEOUT, e.status());
        assertEquals("memserver 10.0.0.9:7471 did not answer READ within 2000 ms; connection declared dead",
                e.getMessage());
    }

    @Test
    void leaseTtlsGoInWholeMillisecondsSaturatingAndBadOnesGoAsTheyAre() {
        assertEquals(1, ControlClient.leaseMillis(Duration.ofNanos(1)));
        assertEquals(1500, ControlClient.leaseMillis(Duration.ofMillis(1500)));
        assertEquals(0, ControlClient.leaseMillis(Duration.ZERO));
        assertEquals(-1, ControlClient.leaseMillis(Duration.ofMillis(-5)));
        assertEquals(Long.MAX_VALUE, ControlClient.leaseMillis(Duration.ofSeconds(Long.MAX_VALUE)));
    }

    // ------------------------------------------------------------------------------------------- greeting

    /** A connected pair on loopback: {@code client} is what the greeting runs on, {@code peer} plays the memserver. */
    record Pair(SocketChannel client, SocketChannel peer) implements AutoCloseable {
        static Pair open() throws IOException {
            try (ServerSocketChannel listener = ServerSocketChannel.open()
                    .bind(new InetSocketAddress("127.0.0.1", 0))) {
                SocketChannel c = SocketChannel.open(listener.getLocalAddress());
                return new Pair(c, listener.accept());
            }
        }

        /** Reads the first request the client sent (whole, it is small) and answers {@code reply}. */
        void answer(byte[] reply) throws Exception {
            read();
            peer.write(ByteBuffer.wrap(reply));
        }

        /** The next request, and every byte it came in (appended to {@code seen} when not null). */
        Message read() throws Exception {
            return read(MessageDecoder.forMemserver(), null);
        }

        Message read(MessageDecoder d, java.io.ByteArrayOutputStream seen) throws Exception {
            ByteBuffer in = ByteBuffer.allocate(4096).order(ByteOrder.LITTLE_ENDIAN);
            Message m;
            do {
                int before = in.position();
                peer.read(in);
                if (seen != null) {
                    seen.write(in.array(), before, in.position() - before);
                }
                in.flip();
                m = d.next(in);
                in.compact();
            } while (m == null);
            return m;
        }

        /**
         * Plays a memserver through AUTH and AUTH_PROOF knowing {@code token} (null: a fake that does not, and
         * answers with a made-up proof); returns every byte the client sent, and the client's proof was checked.
         */
        byte[] authenticate(String token, byte[] after) throws Exception {
            java.io.ByteArrayOutputStream seen = new java.io.ByteArrayOutputStream();
            MessageDecoder d = MessageDecoder.forMemserver();
            Message.AuthStart start = assertInstanceOf(Message.AuthStart.class, read(d, seen));
            byte[] serverNonce = TokenProof.nonce();
            peer.write(MessageEncoder.encode(new Message.AuthChallenge(start.id(), WireBytes.of(serverNonce))));
            Message.AuthProof proof = assertInstanceOf(Message.AuthProof.class, read(d, seen));
            byte[] transcript = TokenProof.transcript(start.clientName(), start.clientNonce().toArray(),
                    serverNonce);
            if (token != null) {
                assertTrue(TokenProof.matches(TokenProof.client(token, transcript), proof.proof().toArray()),
                        "the client's proof checks out with the token");
            }
            byte[] serverProof = token != null ? TokenProof.server(token, transcript) : TokenProof.nonce();
            peer.write(ByteBuffer.wrap(bytes(new Message.AuthWelcome(proof.id(), "srv-1", 1 << 30, 1 << 29,
                    WireBytes.of(serverProof)))));
            peer.write(ByteBuffer.wrap(after));
            return seen.toByteArray();
        }

        public void close() throws IOException {
            client.close();
            peer.close();
        }
    }

    static byte[] bytes(Message... messages) {
        ByteBuffer b = ByteBuffer.allocate(1 << 16);
        for (Message m : messages) {
            b.put(MessageEncoder.encode(m));
        }
        return java.util.Arrays.copyOf(b.array(), b.position());
    }

    @Test
    void theGreetingReturnsWhatTheMemserverSaysAndReadsNoFurther() throws Exception {
        try (Pair p = Pair.open()) {
            Thread peer = Thread.ofPlatform().start(() -> {
                try {
                    p.authenticate("token", bytes(new Message.FlushReply(5)));
                } catch (Exception e) {
                    throw new AssertionError(e);
                }
            });
            assertEquals(new ServerInfo("srv-1", 1, 1 << 30, 1 << 29), ControlClient.greet(p.client(), "peer",
                    "token", "name"));
            peer.join();
            // What came after the reply is still in the socket, for the reader that takes over.
            ByteBuffer next = ByteBuffer.allocate(Protocol.HEADER).order(ByteOrder.LITTLE_ENDIAN);
            while (next.hasRemaining()) {
                p.client().read(next);
            }
            assertEquals(new Message.FlushReply(5), MessageDecoder.forClient().next(next.flip()));
        }
    }

    /**
     * A fake memserver (a raw socket the client was pointed at) sees every byte of the greeting: the token is not in
     * them, in any form it could send on; and since it cannot prove the token, the client will not use it.
     */
    @Test
    void aFakeMemserverLearnsNothingOfTheTokenAndIsNotUsed() throws Exception {
        String token = "f3b1c2d4e5f60718293a4b5c6d7e8f90";
        try (Pair p = Pair.open()) {
            byte[][] seen = new byte[1][];
            Thread peer = Thread.ofPlatform().start(() -> {
                try {
                    seen[0] = p.authenticate(null, new byte[0]);
                } catch (Exception e) {
                    throw new AssertionError(e);
                }
            });
            RemoteMemoryException e = assertThrows(RemoteMemoryException.class,
                    () -> ControlClient.greet(p.client(), "peer", token, "bridge-a"));
            peer.join();
            assertEquals(Status.AUTH_FAILED, e.status());
            assertTrue(e.getMessage().contains("could not prove it knows the token"), e.getMessage());
            String wire = new String(seen[0], java.nio.charset.StandardCharsets.ISO_8859_1);
            assertTrue(wire.contains("bridge-a"), "the greeting was seen");
            assertFalse(wire.contains(token), "the token crossed the wire");
            assertFalse(wire.contains(new String(java.util.HexFormat.of().parseHex(token),
                    java.nio.charset.StandardCharsets.ISO_8859_1)), "the token crossed the wire as bytes");
        }
    }

    /** Without a token there is nothing to prove: HELLO with an empty one, as to a memserver that has none. */
    @Test
    void withoutATokenTheGreetingIsAPlainHello() throws Exception {
        try (Pair p = Pair.open()) {
            Thread peer = Thread.ofPlatform().start(() -> {
                try {
                    Message.Hello h = assertInstanceOf(Message.Hello.class, p.read());
                    assertEquals("", h.token());
                    p.peer().write(ByteBuffer.wrap(bytes(new Message.HelloReply(h.id(), "open", 1, 1))));
                } catch (Exception e) {
                    throw new AssertionError(e);
                }
            });
            assertEquals("open", ControlClient.greet(p.client(), "peer", "", "n").serverId());
            peer.join();
        }
    }

    @Test
    void aRefusalAnotherVersionOrAPeerThatIsNoMemserverFailTheGreetingSayingWhy() throws Exception {
        record Case(byte[] reply, Status status, String says) {
        }
        for (Case c : List.of(
                new Case(bytes(new Message.Error(0, 1, Status.AUTH_FAILED.code(), "wrong token")), Status.AUTH_FAILED,
                        "memserver peer refused the connection: wrong token"),
                new Case(bytes(new Message.OtherVersion(0, 3)), Status.VERSION_MISMATCH,
                        "memserver peer speaks protocol v3, this client v1"),
                new Case("HTTP/1.1 400 Bad Request\r\n\r\n".getBytes(), null, "peer is not a memserver"),
                new Case(bytes(new Message.InfoReply(0, "x", 1, 1)), null, "malformed AUTH reply"),
                new Case(bytes(new Message.Error(0, 0, Status.BAD_REQUEST.code(), "malformed message: expected HELLO "
                        + "first, got OP_36")), Status.VERSION_MISMATCH, "predates token proofs"))) {
            try (Pair p = Pair.open()) {
                Thread peer = Thread.ofPlatform().start(() -> {
                    try {
                        p.answer(c.reply());
                    } catch (Exception e) {
                        throw new AssertionError(e);
                    }
                });
                Exception e = assertThrows(Exception.class, () -> ControlClient.greet(p.client(), "peer", "t", "n"));
                peer.join();
                if (c.status() != null) {
                    assertEquals(c.status(), assertInstanceOf(RemoteMemoryException.class, e).status());
                } else {
                    assertInstanceOf(IOException.class, e);
                }
                assertTrue(e.getMessage().contains(c.says()), "'" + e.getMessage() + "' should say " + c.says());
            }
        }
    }
}
