package dev.rbridge.bridge.volume;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The rebuild's rate limit never lets the copier run ahead of the rate by more than one burst while clients do I/O,
 * and holds nothing back while they do none.
 */
@Timeout(60)
class RebuildPaceTest {
    private static final long MIB = 1 << 20;

    /** A client that completes an operation between any two chunks. */
    private static final AtomicLong BUSY = new AtomicLong();

    @Test
    void copyingMoreThanABurstTakesAtLeastTheTimeTheRateAllowsForTheRest() throws Exception {
        RebuildPace pace = new RebuildPace(20 * MIB, MIB, BUSY::incrementAndGet); // 20 MiB/s, a burst of 1 MiB
        long started = System.nanoTime();
        for (int i = 0; i < 5 * 4; i++) {
            pace.acquire(MIB / 4); // 5 MiB in quarter-MiB chunks: 4 MiB beyond the burst at 20 MiB/s is 200 ms
        }
        long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
        assertTrue(elapsedMs >= 195, "5 MiB passed in " + elapsedMs + " ms at 20 MiB/s with a 1 MiB burst");
    }

    @Test
    void idleTimeIsNotSavedUpBeyondOneBurst() throws Exception {
        RebuildPace pace = new RebuildPace(20 * MIB, MIB, BUSY::incrementAndGet);
        pace.acquire(MIB);
        Thread.sleep(500); // idle for what would have paid for 10 MiB
        long started = System.nanoTime();
        for (int i = 0; i < 5; i++) {
            pace.acquire(MIB);
        }
        long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
        assertTrue(elapsedMs >= 195, "5 MiB after a rest passed in " + elapsedMs + " ms: the rest was saved up");
    }

    @Test
    void withNoClientIoTheCopyIsNeverHeldBackAndOwesNothingWhenClientsReturn() throws Exception {
        AtomicLong clientOps = new AtomicLong();
        RebuildPace pace = new RebuildPace(20 * MIB, MIB, clientOps::get);
        long waited = 0;
        for (int i = 0; i < 64; i++) {
            waited += pace.acquire(MIB); // 64 MiB, which would take 3 s at the rate
        }
        assertEquals(0, waited, "the copy waited with no client about");

        for (int i = 0; i < 5; i++) {
            clientOps.incrementAndGet();
            waited += pace.acquire(MIB);
        }
        assertTrue(waited > 0, "clients are back: the rate holds again");
        assertTrue(waited >= TimeUnit.MILLISECONDS.toNanos(150), "4 MiB beyond the burst at 20 MiB/s, not owed: "
                + waited);
        // What the pacer asked to sleep, not the clock: a slow machine cannot make this pass or fail.
        assertTrue(waited < TimeUnit.SECONDS.toNanos(1), "the 64 MiB copied while clients were idle were charged to"
                + " them: " + TimeUnit.NANOSECONDS.toMillis(waited) + " ms of waits for 5 MiB at 20 MiB/s");
    }

    @Test
    void noRateNeverWaitsAndANegativeOneIsRefused() throws Exception {
        RebuildPace none = new RebuildPace(0, MIB, BUSY::incrementAndGet);
        for (int i = 0; i < 100; i++) {
            assertEquals(0, none.acquire(MIB));
        }
        assertThrows(IllegalArgumentException.class, () -> new RebuildPace(-1, MIB, BUSY::incrementAndGet));
    }
}
