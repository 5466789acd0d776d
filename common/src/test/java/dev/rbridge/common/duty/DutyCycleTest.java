package dev.rbridge.common.duty;

import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class DutyCycleTest {
    private static final Duration LONG = Duration.ofSeconds(30);

    /** A duty answering from a script of rests, recording when each cycle ran. */
    private static final class Scripted implements Duty {
        final BlockingQueue<Long> cycles = new ArrayBlockingQueue<>(1000);
        final long rest;

        Scripted(long rest) {
            this.rest = rest;
        }

        @Override
        public String role() {
            return "test-duty";
        }

        @Override
        public long doWork() {
            cycles.offer(System.nanoTime());
            return rest;
        }
    }

    @Test
    void runsOnAThreadNamedForItsRoleUntilClosed() throws Exception {
        Scripted d = new Scripted(TimeUnit.MILLISECONDS.toNanos(1));
        DutyCycle c = DutyCycle.start(d, Duration.ofSeconds(1));
        for (int i = 0; i < 3; i++) {
            assertNotNull(d.cycles.poll(30, TimeUnit.SECONDS), "cycle " + i);
        }
        assertEquals("test-duty", c.thread().getName());
        assertTrue(c.thread().isDaemon());
        assertTrue(c.running());
        assertTrue(c.close(LONG), "the thread ends on close");
        assertFalse(c.running());
        d.cycles.clear();
        assertNull(d.cycles.poll(50, TimeUnit.MILLISECONDS), "no cycle after close");
    }

    @Test
    void aDutyWithNothingDueRestsUntilWoken() throws Exception {
        Scripted d = new Scripted(Duty.UNTIL_WOKEN);
        try (DutyCycle c = DutyCycle.start(d, Duration.ofSeconds(1))) {
            assertNotNull(d.cycles.poll(30, TimeUnit.SECONDS), "the first cycle runs at start");
            // Until woken it rests: poll until the thread is parked, then a wake runs exactly the next cycle.
            long deadline = System.nanoTime() + LONG.toNanos();
            while (c.thread().getState() != Thread.State.WAITING && System.nanoTime() < deadline) {
                Thread.onSpinWait();
            }
            assertEquals(Thread.State.WAITING, c.thread().getState(), "parked with no deadline");
            assertTrue(d.cycles.isEmpty(), "no cycle while nothing is due");
            c.wake();
            assertNotNull(d.cycles.poll(30, TimeUnit.SECONDS), "a wake runs the next cycle");
        }
    }

    @Test
    void aFailedCycleIsFollowedByTheBackoffAndTheCyclesGoOn() throws Exception {
        BlockingQueue<Long> cycles = new ArrayBlockingQueue<>(10);
        AtomicInteger calls = new AtomicInteger();
        Duration backoff = Duration.ofMillis(300);
        Duty failingOnce = new Duty() {
            @Override
            public String role() {
                return "failing-duty";
            }

            @Override
            public long doWork() throws Exception {
                cycles.offer(System.nanoTime());
                if (calls.incrementAndGet() == 1) {
                    throw new java.io.IOException("planted failure");
                }
                return Duty.UNTIL_WOKEN;
            }
        };
        try (DutyCycle c = DutyCycle.start(failingOnce, backoff)) {
            long failed = cycles.poll(30, TimeUnit.SECONDS);
            Long next = cycles.poll(30, TimeUnit.SECONDS);
            assertNotNull(next, "the cycles go on after a failed one");
            assertTrue(next - failed >= backoff.toNanos(), "the next cycle waits the back-off, not "
                    + TimeUnit.NANOSECONDS.toMillis(next - failed) + " ms");
            assertTrue(c.running());
            assertNull(c.stoppedBy());
        }
    }

    @Test
    void anErrorEndsTheRoleAndIsReported() throws Exception {
        Error planted = new StackOverflowError("planted");
        AtomicInteger calls = new AtomicInteger();
        BlockingQueue<Error> reported = new ArrayBlockingQueue<>(2);
        Duty d = new Duty() {
            @Override
            public String role() {
                return "erring-duty";
            }

            @Override
            public long doWork() {
                calls.incrementAndGet();
                throw planted;
            }

            @Override
            public void onStopped(Error error) {
                reported.offer(error);
            }
        };
        DutyCycle c = DutyCycle.start(d, Duration.ofMillis(1));
        c.thread().join(LONG);
        assertFalse(c.thread().isAlive(), "the role's thread ended");
        assertSame(planted, c.stoppedBy());
        assertFalse(c.running());
        assertEquals(1, calls.get(), "no cycle after the error");
        assertSame(planted, reported.poll(), "the duty heard why it stopped");
        assertTrue(reported.isEmpty(), "and only once");
        c.close();
    }

    @Test
    void closeWaitsForTheCycleUnderWayAndNeverInterruptsIt() throws Exception {
        CountDownLatch inCycle = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        AtomicBoolean interrupted = new AtomicBoolean();
        Duty d = new Duty() {
            @Override
            public String role() {
                return "busy-duty";
            }

            @Override
            public long doWork() {
                inCycle.countDown();
                long deadline = System.nanoTime() + LONG.toNanos();
                while (release.getCount() > 0 && System.nanoTime() < deadline) {
                    if (Thread.currentThread().isInterrupted()) {
                        interrupted.set(true);
                    }
                    Thread.onSpinWait();
                }
                return 0;
            }
        };
        DutyCycle c = DutyCycle.start(d, Duration.ofSeconds(1));
        assertTrue(inCycle.await(30, TimeUnit.SECONDS));
        assertFalse(c.close(Duration.ofMillis(100)), "a cycle under way holds close up to its bound");
        release.countDown();
        assertTrue(c.close(LONG), "the thread ends once the cycle returns");
        assertFalse(interrupted.get(), "close did not interrupt the cycle");
    }

    /**
     * A cycle waiting on a future that never completes: closeInterrupting ends the wait, and the cycle's
     * InterruptedException ends the thread as the close it is, not as a failed cycle (after which, with a 1 ms
     * back-off, the next cycle would wait on the future for ever and the close would time out).
     */
    @Test
    void closeInterruptingEndsAWaitUnderWayAndTheThreadWithoutAnotherCycle() throws Exception {
        CountDownLatch inCycle = new CountDownLatch(1);
        CompletableFuture<Void> never = new CompletableFuture<>();
        AtomicInteger calls = new AtomicInteger();
        Duty d = new Duty() {
            @Override
            public String role() {
                return "waiting-duty";
            }

            @Override
            public long doWork() throws Exception {
                calls.incrementAndGet();
                inCycle.countDown();
                never.get();
                return 0;
            }
        };
        DutyCycle c = DutyCycle.start(d, Duration.ofMillis(1));
        assertTrue(inCycle.await(30, TimeUnit.SECONDS));
        assertTrue(c.closeInterrupting(LONG), "the interrupt ends the wait, and the thread ends");
        assertFalse(c.thread().isAlive());
        assertEquals(1, calls.get(), "no cycle after the close");
        assertNull(c.stoppedBy(), "a close is no error");
    }

    @Test
    void aBackoffMustBePositive() {
        assertThrows(IllegalArgumentException.class, () -> DutyCycle.start(new Scripted(0), Duration.ZERO));
    }
}
