package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.wire.MalformedMessageException;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageDecoder;
import dev.rbridge.rdma.wire.MessageEncoder;
import dev.rbridge.rdma.wire.Protocol;
import dev.rbridge.rdma.wire.WireBytes;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.Function;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The tcp client against a stand-in memserver (a raw socket that greets and then answers as told) for what a real
 * memserver never sends: a reply that does not fit the request it answers, and greetings answered wrongly. A real
 * memserver cannot be made to send these; the stand-in speaks the wire with the codec a memserver uses.
 */
@Timeout(60)
class TcpFakeMemserverTest {
    static final String TOKEN = "SUPER-SECRET-TOKEN";
    /** Long enough that no watchdog ends a call the test waits on: a reply must end it, or the close. */
    static final Duration OP_TIMEOUT = Duration.ofSeconds(120);
    static final Duration PROMPTLY = Duration.ofSeconds(10);
    static final RegionDescriptor REGION = new RegionDescriptor(1, 1 << 20, 42, RegionTag.scratch("fake"));

    /**
     * A stand-in memserver for one connection: answers the HELLO with {@code greeting} (empty: closes instead), then
     * each later request with what {@code answer} makes of it (null: no answer).
     */
    static final class FakeMemserver implements AutoCloseable {
        private final ServerSocketChannel listener;
        private final Thread thread;

        FakeMemserver(byte[] greeting, Function<Message, byte[]> answer) throws IOException {
            listener = ServerSocketChannel.open().bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            thread = Thread.ofPlatform().daemon().name("fake-memserver").start(() -> serve(greeting, answer));
        }

        InetSocketAddress address() throws IOException {
            return (InetSocketAddress) listener.getLocalAddress();
        }

        private void serve(byte[] greeting, Function<Message, byte[]> answer) {
            try (SocketChannel ch = listener.accept()) {
                MessageDecoder decoder = MessageDecoder.forMemserver();
                ByteBuffer in = ByteBuffer.allocate(256 << 10).order(ByteOrder.LITTLE_ENDIAN).flip();
                boolean greeted = false;
                Message.AuthStart started = null;
                byte[] serverNonce = dev.rbridge.rdma.TokenProof.nonce();
                while (true) {
                    Message m = decoder.next(in);
                    if (m == null) {
                        in.compact();
                        int n = ch.read(in);
                        in.flip();
                        if (n < 0) {
                            return;
                        }
                        continue;
                    }
                    if (decoder.payloadRemaining() > 0) {
                        decoder.skipPayload();
                    }
                    if (!greeted && greeting.length == 0) {
                        return; // no answer at all: the connection closes
                    }
                    if (!greeted && greeting == WELCOME && m instanceof Message.AuthStart a) {
                        started = a; // a welcome is earned: the token proven both ways, as a memserver would
                        ch.write(MessageEncoder.encode(new Message.AuthChallenge(a.id(), WireBytes.of(serverNonce))));
                        continue;
                    }
                    byte[] reply = greeted ? answer.apply(m) : greeting;
                    if (!greeted && started != null && m instanceof Message.AuthProof) {
                        byte[] transcript = dev.rbridge.rdma.TokenProof.transcript(started.clientName(),
                                started.clientNonce().toArray(), serverNonce);
                        reply = bytes(new Message.AuthWelcome(m.id(), "fake", 1 << 30, 1 << 30, WireBytes.of(
                                dev.rbridge.rdma.TokenProof.server(TOKEN, transcript))), 0);
                    }
                    greeted = true;
                    if (reply != null) {
                        ch.write(ByteBuffer.wrap(reply));
                    }
                }
            } catch (IOException | MalformedMessageException e) {
                // the client went away, or the test ended
            }
        }

        @Override
        public void close() throws Exception {
            listener.close();
            thread.join(5_000);
        }
    }

    static byte[] bytes(Message m, int dataBytes) {
        ByteBuffer head = MessageEncoder.encode(m);
        byte[] b = new byte[head.remaining() + dataBytes];
        head.get(b, 0, head.remaining());
        return b;
    }

    static final byte[] WELCOME = bytes(new Message.HelloReply(0, "fake", 1 << 30, 1 << 30), 0);

    RemoteConnection connect(InetSocketAddress address, boolean callerDriven) throws RemoteMemoryException {
        return new TcpProvider().connect(new ConnectParams().address(address).token(TOKEN).clientName("victim")
                .callerDriven(callerDriven).operationTimeout(OP_TIMEOUT).connectTimeout(Duration.ofSeconds(5)));
    }

    /** How {@code f} failed, waited on by join (so a caller-driven one reads the replies), within {@link #PROMPTLY}. */
    static RemoteMemoryException failure(CompletableFuture<?> f) {
        return assertTimeoutPreemptively(PROMPTLY, () -> {
            CompletionException e = assertThrows(CompletionException.class, f::join);
            return assertInstanceOf(RemoteMemoryException.class, e.getCause());
        }, "the operation must fail once its reply turned out wrong, not wait for ever");
    }

    @ParameterizedTest(name = "callerDriven={0}")
    @ValueSource(booleans = {false, true})
    void aReadAnsweredWithTooFewBytesFailsPromptly(boolean callerDriven) throws Exception {
        try (FakeMemserver fake = new FakeMemserver(WELCOME, m -> m instanceof Message.Read r
                ? bytes(new Message.ReadReply(r.id(), 8), 8)
                : null);
                RemoteConnection c = connect(fake.address(), callerDriven);
                Arena arena = Arena.ofShared()) {
            RemoteMemoryException e = failure(c.read(REGION, 0, arena.allocate(4096)));
            assertEquals(Status.CONNECTION_LOST, e.status(), e.getMessage());
            assertTrue(e.getMessage().contains("READ reply of 8 bytes"), e.getMessage());
            assertFalse(c.isOpen());
        }
    }

    @ParameterizedTest(name = "callerDriven={0}")
    @ValueSource(booleans = {false, true})
    void aLeaseAnsweredWithReadDataFailsPromptly(boolean callerDriven) throws Exception {
        try (FakeMemserver fake = new FakeMemserver(WELCOME, m -> m instanceof Message.Lease l
                ? bytes(new Message.ReadReply(l.id(), 8), 8)
                : null);
                RemoteConnection c = connect(fake.address(), callerDriven)) {
            RemoteMemoryException e = failure(c.lease("vol", "owner", Duration.ofSeconds(30)));
            assertEquals(Status.CONNECTION_LOST, e.status(), e.getMessage());
            assertFalse(c.isOpen());
        }
    }

    /**
     * Greetings answered wrongly in each way the client tells apart: whatever it says about them, through every
     * exception and its causes, must not repeat the token it sent (it ends up in logs, /readyz and admin JSON).
     */
    @Test
    void noGreetingErrorRepeatsTheToken() throws Exception {
        byte[] tooLong = bytes(new Message.ListReply(0, List.of()), 0);
        ByteBuffer.wrap(tooLong).order(ByteOrder.LITTLE_ENDIAN).putInt(20, Protocol.MAX_CONTROL_BODY + 1);
        List<byte[]> greetings = List.of(
                bytes(new Message.ReadReply(0, 8), 8), // data in reply to HELLO
                tooLong, // a reply too long for a greeting
                bytes(new Message.InfoReply(0, "not-hello", 1, 1), 0), // a reply to another opcode
                bytes(new Message.Error(0, 1, Status.AUTH_FAILED.code(), "wrong token"), 0),
                bytes(new Message.OtherVersion(0, 9), 0),
                "HTTP/1.1 400 Bad Request\r\n\r\n".getBytes(),
                new byte[0]); // nothing: the connection closes
        for (byte[] greeting : greetings) {
            try (FakeMemserver fake = new FakeMemserver(greeting, m -> null)) {
                RemoteMemoryException e = assertThrows(RemoteMemoryException.class,
                        () -> connect(fake.address(), false).close());
                for (Throwable t = e; t != null; t = t.getCause()) {
                    assertFalse(String.valueOf(t).contains(TOKEN), "the token leaks: " + t);
                }
            }
        }
    }
}
