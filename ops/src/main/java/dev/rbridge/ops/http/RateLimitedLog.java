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

    /**
     * Logs {@code message} at WARN unless a warning of the same key went out less than an interval ago. Keys must
     * come from a small fixed set (reasons, never peer addresses), since each is remembered.
     */
    public void warn(String key, String message) {
        warn(key, message, null);
    }

    /** As {@link #warn(String, String)}, with the stack trace of {@code failure} when it is logged. */
    public void warn(String key, String message, Throwable failure) {
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
        String text = suppressed == 0 ? message : message + " (" + suppressed + " more like it in the last "
                + TimeUnit.NANOSECONDS.toSeconds(intervalNanos) + " s not logged)";
        if (failure == null) {
            log.warn("{}", text);
        } else {
            log.warn("{}", text, failure);
        }
    }
}
