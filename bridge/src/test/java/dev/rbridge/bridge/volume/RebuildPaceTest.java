package dev.rbridge.bridge.volume;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The rebuild's rate limit never lets the copier run ahead of the rate by more than one burst. */
@Timeout(60)
class RebuildPaceTest {
    private static final long MIB = 1 << 20;

    @Test
    void copyingMoreThanABurstTakesAtLeastTheTimeTheRateAllowsForTheRest() throws Exception {
        RebuildPace pace = new RebuildPace(20 * MIB, MIB); // 20 MiB/s, a burst of 1 MiB
        long started = System.nanoTime();
        for (int i = 0; i < 5 * 4; i++) {
            pace.acquire(MIB / 4); // 5 MiB in quarter-MiB chunks: 4 MiB beyond the burst at 20 MiB/s is 200 ms
        }
        long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
        assertTrue(elapsedMs >= 195, "5 MiB passed in " + elapsedMs + " ms at 20 MiB/s with a 1 MiB burst");
    }

    @Test
    void idleTimeIsNotSavedUpBeyondOneBurst() throws Exception {
        RebuildPace pace = new RebuildPace(20 * MIB, MIB);
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
    void aNegativeRateIsRefused() {
        assertThrows(IllegalArgumentException.class, () -> new RebuildPace(-1, MIB));
    }
}
