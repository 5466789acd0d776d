package dev.rbridge.bridge.volume;

import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;

/**
 * The rebuild's rate limit, which yields to clients: the copier asks before each chunk, and while clients' requests
 * reach the memservers it is held back so that it copies no faster than the configured bytes a second (a burst of at
 * most one window of chunks). When no client operation completed for {@link #QUIET} the copy runs at full speed (a
 * shorter look would take a client held up behind the copy itself for an idle one).
 * A rate of zero means no limit. Used by the rebuild thread alone.
 */
final class RebuildPace {
    /** How long clients must do no I/O before the copy runs at full speed. */
    static final long QUIET = TimeUnit.MILLISECONDS.toNanos(100);

    private final long bytesPerSecond;
    private final long burstNanos;
    private final LongSupplier clientOperations;
    /** When the bytes asked for so far would have been copied at the rate. */
    private long dueNanos;
    private long clientOperationsSeen;
    private long clientsSeenNanos;

    /**
     * @param bytesPerSecond the rate while clients do I/O, or 0 for no limit
     * @param burstBytes how far ahead of the rate the copier may run (its window)
     * @param clientOperations a count of the clients' remote operations that grows while they do I/O
     */
    RebuildPace(long bytesPerSecond, long burstBytes, LongSupplier clientOperations) {
        if (bytesPerSecond < 0) {
            throw new IllegalArgumentException("rebuild rate " + bytesPerSecond + " is negative");
        }
        this.bytesPerSecond = bytesPerSecond;
        this.burstNanos = bytesPerSecond == 0 ? 0 : nanosFor(burstBytes);
        this.clientOperations = clientOperations;
        this.dueNanos = System.nanoTime();
        this.clientsSeenNanos = dueNanos - QUIET;
    }

    /** Waits until {@code bytes} more may be copied; returns the nanoseconds it waited. */
    long acquire(long bytes) throws InterruptedException {
        if (bytesPerSecond == 0) {
            return 0;
        }
        long now = System.nanoTime();
        long ops = clientOperations.getAsLong();
        if (ops != clientOperationsSeen) {
            clientOperationsSeen = ops;
            clientsSeenNanos = now;
        }
        boolean clientsActive = now - clientsSeenNanos < QUIET;
        if (!clientsActive || dueNanos - now < 0) {
            dueNanos = now; // neither idle time nor a copy with no client about is saved up: the burst alone runs ahead
        }
        if (!clientsActive) {
            return 0;
        }
        dueNanos += nanosFor(bytes);
        long wait = dueNanos - burstNanos - now;
        if (wait <= 0) {
            return 0;
        }
        TimeUnit.NANOSECONDS.sleep(wait);
        return wait;
    }

    private long nanosFor(long bytes) {
        return (long) (bytes * 1e9 / bytesPerSecond);
    }
}
