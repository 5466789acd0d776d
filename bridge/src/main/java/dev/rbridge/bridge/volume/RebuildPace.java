package dev.rbridge.bridge.volume;

import java.util.concurrent.TimeUnit;

/**
 * The rebuild's rate limit: the copier asks before each chunk and is held back so that, over any stretch of time,
 * it copies no faster than the configured bytes a second (a burst of at most one window of chunks). Zero means no
 * limit. Used by the rebuild thread alone.
 */
final class RebuildPace {
    private final long bytesPerSecond;
    private final long burstNanos;
    /** When the bytes asked for so far would have been copied at the rate. */
    private long dueNanos;

    /**
     * @param bytesPerSecond the rate, or 0 for none
     * @param burstBytes how far ahead of the rate the copier may run (its window)
     */
    RebuildPace(long bytesPerSecond, long burstBytes) {
        if (bytesPerSecond < 0) {
            throw new IllegalArgumentException("rebuild rate " + bytesPerSecond + " is negative");
        }
        this.bytesPerSecond = bytesPerSecond;
        this.burstNanos = bytesPerSecond == 0 ? 0 : nanosFor(burstBytes);
        this.dueNanos = System.nanoTime();
    }

    long bytesPerSecond() {
        return bytesPerSecond;
    }

    /** Waits until {@code bytes} more may be copied. */
    void acquire(long bytes) throws InterruptedException {
        if (bytesPerSecond == 0) {
            return;
        }
        long now = System.nanoTime();
        if (dueNanos - now < 0) {
            dueNanos = now; // idle time is not saved up: the burst alone may run ahead of the rate
        }
        dueNanos += nanosFor(bytes);
        long wait = dueNanos - burstNanos - now;
        if (wait > 0) {
            TimeUnit.NANOSECONDS.sleep(wait);
        }
    }

    private long nanosFor(long bytes) {
        return (long) (bytes * 1e9 / bytesPerSecond);
    }
}
