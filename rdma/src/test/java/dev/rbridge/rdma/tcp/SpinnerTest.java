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
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The spinner on a real loopback connection: when it gives up, that requests issued while it polls keep it polling,
 * and for how long at most. Where the peer writes, it writes after the spinner has given up (or, in the restart test,
 * inside the longest poll, with a few attempts allowed), so the count of requests issued decides the outcome rather
 * than the scheduler.
 */
@Timeout(30)
class SpinnerTest {
    /** Millions of budgets and far beyond the longest poll: only a spinner that never gives up takes this long. */
    private static final java.time.Duration GIVE_UP_WITHIN = java.time.Duration.ofSeconds(10);

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

    /**
     * Gives up, not blocks: with no input at all it must still return (false), so the input is written only after
     * it did, and a spinner that waited for input instead of giving up hangs here until the bound fails it. (Timing
     * the give-up against a late writer made the outcome the scheduler's on a loaded host.)
     */
    private static boolean awaitBounded(Spinner spinner) {
        org.junit.jupiter.api.function.ThrowingSupplier<Boolean> await = spinner::await;
        return assertTimeoutPreemptively(GIVE_UP_WITHIN, await, "the spinner never gave up without input");
    }

    @Test
    void withNothingIssuedItGivesUpAfterTheBudgetAndThenBlocksAtOnce() throws Exception {
        Spinner spinner = new Spinner(Link.plain(pair.client), new AtomicLong()::get);
        assertFalse(awaitBounded(spinner), "no input within the budget");
        // The empty poll makes the next wait block at once rather than poll again.
        assertFalse(awaitBounded(spinner));
        pair.accepted.write(ByteBuffer.wrap(new byte[]{1}));
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
        assertFalse(awaitBounded(spinner), "polled on because requests kept coming");
    }

    @Test
    void theMemserverSideHasNoCountAndGivesUp() throws Exception {
        Spinner spinner = new Spinner(Link.plain(pair.client), null);
        assertFalse(awaitBounded(spinner));
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
                pair.accepted.write(ByteBuffer.wrap(new byte[]{1}));
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
