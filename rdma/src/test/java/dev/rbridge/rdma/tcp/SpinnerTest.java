package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.link.Link;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.function.LongSupplier;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The spinner on a real loopback connection: when it gives up, that requests issued while it polls keep it polling,
 * and for how long at most. The peer writes long after the budget, so the count of requests issued decides the
 * outcome rather than the scheduler.
 */
@Timeout(30)
class SpinnerTest {
    private static final long LATE_MILLIS = 200; // thousands of budgets, and far beyond the longest poll

    LoopbackPair pair;
    final List<Thread> writers = new ArrayList<>();

    @BeforeEach
    void connect() throws IOException {
        pair = new LoopbackPair();
    }

    @AfterEach
    void close() throws Exception {
        for (Thread w : writers) {
            w.interrupt(); // each writes once and ends; none outlives its test
            w.join(10_000);
            assertFalse(w.isAlive());
        }
        pair.close();
    }

    @Test
    void withNothingIssuedItGivesUpAfterTheBudgetAndThenBlocksAtOnce() throws Exception {
        Spinner spinner = new Spinner(Link.plain(pair.client), new AtomicLong()::get);
        Thread writer = writeAfter(new CountDownLatch(0), TimeUnit.MILLISECONDS.toNanos(LATE_MILLIS));
        long start = System.nanoTime();
        assertFalse(spinner.await(), "no input within the budget");
        assertTrue(System.nanoTime() - start < TimeUnit.MILLISECONDS.toNanos(LATE_MILLIS), "gave up before the input");
        // The empty poll makes the next wait block at once rather than poll again.
        assertFalse(spinner.await());
        writer.join();
        // The input is there now; the back-off is spent, so a wait finds it (the loop only covers a kernel that has
        // not made the byte readable the instant write returned).
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        boolean found = spinner.await();
        while (!found && System.nanoTime() < until) {
            found = spinner.await();
        }
        assertTrue(found);
    }

    @Test
    void aRequestIssuedWhilePollingRestartsTheBudget() throws Exception {
        // The count grows at every look, as under a steady stream of requests; the input comes 0.4 ms (eight
        // budgets) after polling began, inside the longest poll. Without the restart the poll ends after one budget.
        // A writer that is late past the longest poll (a loaded host) fails an attempt, so a few are allowed.
        int attempts = 0;
        boolean found = false;
        while (!found && attempts < 5) {
            attempts++;
            CountDownLatch polling = new CountDownLatch(1);
            AtomicLong issued = new AtomicLong();
            LongSupplier count = () -> {
                polling.countDown();
                return issued.incrementAndGet();
            };
            Spinner spinner = new Spinner(Link.plain(pair.client), count);
            Thread writer = writeAfter(polling, 8 * Spinner.BUDGET_NANOS);
            found = spinner.await();
            writer.join();
            if (polling.getCount() == 0) {
                pair.client.read(ByteBuffer.allocate(1)); // it wrote: the next attempt starts with nothing to read
            }
        }
        assertTrue(found, "in " + attempts + " attempts the spinner never polled until the input came");
    }

    @Test
    void requestsIssuedForeverDoNotKeepItPollingPastTheLongestPoll() throws Exception {
        AtomicLong issued = new AtomicLong();
        Spinner spinner = new Spinner(Link.plain(pair.client), issued::incrementAndGet);
        writeAfter(new CountDownLatch(0), TimeUnit.MILLISECONDS.toNanos(LATE_MILLIS));
        long start = System.nanoTime();
        assertFalse(spinner.await(), "polled on until the input came because requests kept coming");
        assertTrue(System.nanoTime() - start < TimeUnit.MILLISECONDS.toNanos(LATE_MILLIS));
    }

    @Test
    void theMemserverSideHasNoCountAndGivesUp() throws Exception {
        Spinner spinner = new Spinner(Link.plain(pair.client), null);
        writeAfter(new CountDownLatch(0), TimeUnit.MILLISECONDS.toNanos(LATE_MILLIS));
        assertFalse(spinner.await());
    }

    /**
     * A thread that, once {@code go} opens, waits {@code nanos} and writes one byte to the client; if {@code go} stays
     * shut for 2 s (a spinner that never looked at its count), it writes nothing.
     */
    private Thread writeAfter(CountDownLatch go, long nanos) {
        Thread w = Thread.ofPlatform().start(() -> {
            try {
                if (!go.await(2, TimeUnit.SECONDS)) {
                    return;
                }
                long until = System.nanoTime() + nanos;
                while (System.nanoTime() < until) {
                    LockSupport.parkNanos(until - System.nanoTime());
                }
                pair.accepted.write(ByteBuffer.wrap(new byte[] {1}));
            } catch (InterruptedException e) {
                // the test ended before the write was due (close interrupts): nothing to write to any more
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
        });
        writers.add(w);
        return w;
    }
}
