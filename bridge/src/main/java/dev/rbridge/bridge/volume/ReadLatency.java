package dev.rbridge.bridge.volume;

import java.util.Arrays;
import java.util.concurrent.atomic.AtomicLong;

/**
 * What a small read of one volume takes, as the hedge delay needs it: the 95th percentile of the last {@link #WINDOW}
 * reads that were answered by their first attempt (the latency a client sees when nothing stalls), recomputed every
 * {@link #EVERY} samples. Hedging there costs about one read in twenty a second attempt when nothing stalls, and
 * bounds what a stall costs a read to about the 95th percentile plus one read (the tail-at-scale rule). Reads a hedge
 * answered are not samples: what a stall takes must not teach the estimate to wait for stalls.
 *
 * <p>Samples are written without locks (a racing write loses one sample); the sort of 256 values every 32 reads is the
 * only cost beyond a store.
 */
final class ReadLatency {
    static final int WINDOW = 256;
    static final int EVERY = 32;
    static final double PERCENTILE = 0.95;
    /** The shortest hedge delay: below it a hedge would mostly duplicate reads that were about to answer. */
    static final long MIN_DELAY_NANOS = 50_000;
    /** The longest hedge delay, whatever the reads take. */
    static final long MAX_DELAY_NANOS = 20_000_000;
    /** The delay until the first window is full. */
    static final long INITIAL_DELAY_NANOS = 1_000_000;

    private final long[] window = new long[WINDOW];
    private final AtomicLong samples = new AtomicLong();
    private volatile long delay = INITIAL_DELAY_NANOS;

    void sample(long nanos) {
        long n = samples.getAndIncrement();
        window[(int) (n % WINDOW)] = nanos;
        if (n + 1 >= WINDOW && (n + 1) % EVERY == 0) {
            long[] sorted = window.clone();
            Arrays.sort(sorted);
            delay = Math.clamp(sorted[(int) (WINDOW * PERCENTILE)], MIN_DELAY_NANOS, MAX_DELAY_NANOS);
        }
    }

    /** How long a read may take before it is hedged. */
    long delayNanos() {
        return delay;
    }
}
