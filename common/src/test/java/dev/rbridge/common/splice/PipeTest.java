package dev.rbridge.common.splice;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Random;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Pipes and socket descriptors over real loopback sockets. */
class PipeTest {

    /** A connected pair: [0] the connecting end, [1] the accepted one. */
    private static SocketChannel[] pair() throws IOException {
        try (ServerSocketChannel server = ServerSocketChannel.open()) {
            server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            SocketChannel a = SocketChannel.open(server.getLocalAddress());
            return new SocketChannel[]{a, server.accept()};
        }
    }

    private static byte[] random(int n, long seed) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

    private static void writeAll(SocketChannel c, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            c.write(b);
        }
    }

    private static byte[] readAll(SocketChannel c, int n) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(n);
        while (b.hasRemaining()) {
            if (c.read(b) < 0) {
                throw new IOException("end of stream after " + b.position());
            }
        }
        return b.array();
    }

    /** What a helper thread does; its failure comes back through the task's {@code get}. */
    private interface SocketWork {
        void run() throws IOException;
    }

    /** Runs {@code work} in a thread of its own; {@code get} on the task rethrows what it threw. */
    private static FutureTask<Void> inThread(SocketWork work) {
        FutureTask<Void> task = new FutureTask<>(() -> {
            work.run();
            return null;
        });
        Thread.ofPlatform().start(task);
        return task;
    }

    @Test
    void forwardsAHeadFromMemoryAndTheRestFromASocketIntoAnotherSocket() throws Exception {
        SocketChannel[] in = pair();
        SocketChannel[] out = pair();
        int length = 1 << 20;
        byte[] data = random(length, 1);
        int head = 1000;
        try (Pipe pipe = Pipe.open(length); SocketDescriptor from = SocketDescriptor.of(in[1]);
                SocketDescriptor to = SocketDescriptor.of(out[0])) {
            assertTrue(pipe.capacity() >= length);
            ByteBuffer first = ByteBuffer.allocateDirect(head).put(data, 0, head).flip();
            assertEquals(head, pipe.write(first));
            FutureTask<Void> sender = inThread(() -> writeAll(in[0], ByteBuffer.wrap(data, head, length - head)));
            // The test's socket is blocking: splice only what is there, as the bridge does.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            int moved = head;
            while (moved < length) {
                int ready = in[1].socket().getInputStream().available();
                if (ready == 0) {
                    if (Thread.interrupted()) {
                        throw new InterruptedException("interrupted after " + moved + " of " + length + " bytes");
                    }
                    if (sender.isDone()) {
                        sender.get(); // a sender that failed fails the test here, not as a hang below
                    }
                    assertTrue(System.nanoTime() < deadline, "only " + moved + " of " + length + " bytes came in 30 s");
                    Thread.onSpinWait();
                    continue;
                }
                int n = pipe.spliceFrom(from.fd(), Math.min(ready, length - moved));
                assertTrue(n >= 0, "end of stream");
                moved += n;
            }
            sender.get(30, TimeUnit.SECONDS);
            assertEquals(length, pipe.held());
            FutureTask<byte[]> receiver = new FutureTask<>(() -> readAll(out[1], length));
            Thread.ofPlatform().start(receiver);
            while (pipe.held() > 0) {
                pipe.spliceTo(to.fd(), Integer.MAX_VALUE, false);
            }
            // get() rethrows the receiver's failure (ExecutionException) and the check runs in the test's thread.
            assertArrayEquals(data, receiver.get(30, TimeUnit.SECONDS));
        } finally {
            for (SocketChannel c : new SocketChannel[]{in[0], in[1], out[0], out[1]}) {
                c.close();
            }
        }
    }

    @Test
    void aFullPipeTakesNothingMoreAndAnEndedSocketSaysSo() throws Exception {
        SocketChannel[] in = pair();
        try (Pipe pipe = Pipe.open(64 << 10); SocketDescriptor from = SocketDescriptor.of(in[1])) {
            ByteBuffer fill = ByteBuffer.allocateDirect(pipe.capacity() + 4096);
            int taken = pipe.write(fill);
            assertEquals(pipe.capacity(), taken);
            assertEquals(0, pipe.write(fill), "full");
            writeAll(in[0], ByteBuffer.wrap(random(4096, 2)));
            assertEquals(0, pipe.spliceFrom(from.fd(), 4096), "full: nothing moves, nothing waits");
            in[0].close();
            try (Pipe empty = Pipe.open(64 << 10)) {
                assertEquals(4096, empty.spliceFrom(from.fd(), 8192));
                assertEquals(-1, empty.spliceFrom(from.fd(), 8192));
            }
        } finally {
            in[0].close();
            in[1].close();
        }
    }

    @Test
    void theDuplicateKeepsTheSocketOpenUntilItIsClosed() throws Exception {
        SocketChannel[] c = pair();
        SocketDescriptor d = SocketDescriptor.of(c[1]);
        c[1].close();
        c[0].configureBlocking(false);
        assertEquals(0, c[0].read(ByteBuffer.allocate(1)), "the peer sees no end while the duplicate is open");
        d.close();
        c[0].configureBlocking(true);
        assertEquals(-1, c[0].read(ByteBuffer.allocate(1)));
        assertThrows(IllegalStateException.class, d::fd);
        c[0].close();
    }

    @Test
    void closingWakesAWaiterAndTheDuplicateOutlivesItsLastUse() throws Exception {
        SocketChannel[] c = pair();
        SocketDescriptor d = SocketDescriptor.of(c[1]);
        assertTrue(d.enter());
        int fd = d.fd();
        long start = System.nanoTime();
        Thread closer = Thread.ofPlatform().start(() -> {
            try {
                Thread.sleep(100);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            d.close();
        });
        assertTrue(d.awaitReadable(30_000), "the shutdown wakes the waiter");
        assertTrue(System.nanoTime() - start < 20_000_000_000L);
        closer.join();
        assertTrue(!d.enter(), "closed: no new use");
        assertEquals(fd, d.fd(), "still ours while in use");
        try (Pipe pipe = Pipe.open(4096)) {
            assertEquals(-1, pipe.spliceFrom(d.fd(), 100), "shut down: the end");
        }
        d.exit();
        assertThrows(IllegalStateException.class, d::fd);
        c[0].close();
        c[1].close();
    }

    @Test
    void aClosedPipeRefusesEveryCallInsteadOfUsingItsOldNumbers() throws Exception {
        Pipe pipe = Pipe.open(4096);
        pipe.close();
        pipe.close();
        ByteBuffer b = ByteBuffer.allocateDirect(16);
        IOException e = assertThrows(IOException.class, () -> pipe.write(b));
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
        assertThrows(IOException.class, () -> pipe.spliceFrom(0, 16));
    }

    @Test
    void aPipeLargerThanTheKernelAllowsIsRefusedWithTheReason() {
        IOException e = assertThrows(IOException.class, () -> Pipe.open(Integer.MAX_VALUE / 2));
        assertTrue(e.getMessage().contains("pipe"), e.getMessage());
    }
}
