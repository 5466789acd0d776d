package dev.rbridge.rdma.tcp;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The spinner on a real loopback connection: when it gives up, and that requests sent while it polls keep it polling.
 * The peer writes long after the budget, so the sent count decides the outcome rather than the scheduler.
 */
@Timeout(30)
class SpinnerTest {
    private static final long PEER_DELAY_MILLIS = 200; // thousands of budgets

    ServerSocketChannel listener;
    SocketChannel client;
    SocketChannel peer;

    @BeforeEach
    void connect() throws IOException {
        listener = ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0));
        client = SocketChannel.open(listener.getLocalAddress());
        peer = listener.accept();
    }

    @AfterEach
    void close() throws IOException {
        client.close();
        peer.close();
        listener.close();
    }

    @Test
    void withNothingSentItGivesUpAfterTheBudgetAndThenBlocksAtOnce() throws Exception {
        Spinner spinner = new Spinner(client.socket().getInputStream(), new AtomicLong()::get);
        Thread writer = writeLater();
        long start = System.nanoTime();
        assertFalse(spinner.await(), "no input within the budget");
        assertTrue(System.nanoTime() - start < PEER_DELAY_MILLIS * 1_000_000, "gave up before the input came");
        // The empty poll makes the next wait block at once rather than poll again.
        assertFalse(spinner.await());
        writer.join();
        // Input already there: found without polling at all once the back-off is spent.
        assertTrue(spinner.await());
    }

    @Test
    void aRequestSentWhilePollingRestartsTheBudget() throws Exception {
        // Every look at the count finds one more request sent, as under a steady stream of sends; the input comes 20
        // budgets later. A pause of a whole budget between two looks (a safepoint, a preemption) legitimately ends the
        // poll, so a few attempts are allowed; without the restart every attempt ends after one budget.
        AtomicLong sent = new AtomicLong();
        int attempts = 0;
        boolean found = false;
        while (!found && attempts++ < 5) {
            Spinner spinner = new Spinner(client.socket().getInputStream(), sent::incrementAndGet);
            Thread writer = writeLater(1);
            found = spinner.await();
            writer.join();
            client.read(ByteBuffer.allocate(1)); // the next attempt starts with nothing to read
        }
        assertTrue(found, "in " + attempts + " attempts the spinner never polled until the input came 1 ms later");
    }

    @Test
    void theMemserverSideHasNoSentCountAndGivesUp() throws Exception {
        Spinner spinner = new Spinner(client.socket().getInputStream(), null);
        writeLater();
        assertFalse(spinner.await());
    }

    private Thread writeLater() {
        return writeLater(PEER_DELAY_MILLIS);
    }

    private Thread writeLater(long millis) {
        return Thread.ofPlatform().start(() -> {
            try {
                Thread.sleep(millis);
                peer.write(ByteBuffer.wrap(new byte[] {1}));
            } catch (InterruptedException | IOException e) {
                throw new IllegalStateException(e);
            }
        });
    }
}
