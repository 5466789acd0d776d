package dev.rbridge.ops.metrics;

import java.time.Duration;

/**
 * Histogram bucket bounds for every duration this project measures: a 1-2.5-5 series from 1 µs to 10 s (22 bounds),
 * because the data path spans a few µs (RDMA, the local transport) to tens of ms (a loaded tcp link, a rebuild
 * gate), and timeouts are seconds. Fixed bounds rather than Micrometer's generated percentile histogram keep the
 * series count per timer small and equal across processes, so bridge and memserver histograms aggregate.
 */
final class Buckets {
    private Buckets() {}

    static final Duration[] LATENCY = latency();

    private static Duration[] latency() {
        Duration[] out = new Duration[22];
        int n = 0;
        long decadeNanos = 1_000; // 1 µs
        while (n < out.length) {
            for (long step : new long[]{1_000, 2_500, 5_000}) { // 1, 2.5 and 5 times the decade, in thousandths
                if (n == out.length) {
                    break;
                }
                out[n++] = Duration.ofNanos(decadeNanos * step / 1_000);
            }
            decadeNanos *= 10;
        }
        return out;
    }
}
