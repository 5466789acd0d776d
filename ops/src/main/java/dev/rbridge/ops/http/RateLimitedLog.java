package dev.rbridge.ops.http;

import org.slf4j.Logger;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Warnings that a peer can trigger at will, at most one per key per interval, each saying how many like it were
 * left out since the last one: a flood of bad requests must not fill the log.
 */
public final class RateLimitedLog {
    private final Logger log;
    private final long intervalNanos;
    private final Map<String, long[]> keys = new HashMap<>(); // key -> {last logged at, suppressed since}

    public RateLimitedLog(Logger log, long interval, TimeUnit unit) {
        this.log = log;
        this.intervalNanos = unit.toNanos(interval);
    }

    /** Logs {@code message} at WARN unless a warning of the same key went out less than an interval ago. */
    public void warn(String key, String message) {
        long now = System.nanoTime();
        long suppressed;
        synchronized (keys) {
            long[] k = keys.get(key);
            if (k != null && now - k[0] < intervalNanos) {
                k[1]++;
                return;
            }
            suppressed = k == null ? 0 : k[1];
            keys.put(key, new long[] {now, 0});
        }
        if (suppressed > 0) {
            log.warn("{} ({} more like it in the last {} s not logged)", message, suppressed,
                    TimeUnit.NANOSECONDS.toSeconds(intervalNanos));
        } else {
            log.warn("{}", message);
        }
    }
}
