package dev.rbridge.common;

import org.slf4j.Logger;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;

/**
 * Log lines a peer can cause (refused connections, malformed messages, wrong tokens), at most one per reason per
 * interval: a flood of them must not fill the disk or bury everything else in the log. The line that ends a quiet
 * interval says how many like it were suppressed before it. Reasons are fixed strings of the code, never a peer's
 * bytes, so the table stays as small as the code's list of reasons.
 */
public final class RateLimitedLog {
    /** One line per reason per five seconds: enough to see that something goes on and what, not every instance. */
    public static final long INTERVAL_NANOS = TimeUnit.SECONDS.toNanos(5);

    private final Logger log;
    private final long intervalNanos;
    private final LongSupplier clock;
    private final Map<String, Window> windows = new ConcurrentHashMap<>();

    public RateLimitedLog(Logger log) {
        this(log, INTERVAL_NANOS, System::nanoTime);
    }

    /** {@code clock}: nanoseconds, as {@link System#nanoTime()}; tests pass their own. */
    public RateLimitedLog(Logger log, long intervalNanos, LongSupplier clock) {
        this.log = log;
        this.intervalNanos = intervalNanos;
        this.clock = clock;
    }

    public void warn(String reason, String format, Object... args) {
        long suppressed = admit(reason);
        if (suppressed >= 0 && log.isWarnEnabled()) {
            log.warn(format + suffix(suppressed), args);
        }
    }

    public void info(String reason, String format, Object... args) {
        long suppressed = admit(reason);
        if (suppressed >= 0 && log.isInfoEnabled()) {
            log.info(format + suffix(suppressed), args);
        }
    }

    public void error(String reason, String format, Object... args) {
        long suppressed = admit(reason);
        if (suppressed >= 0) {
            log.error(format + suffix(suppressed), args);
        }
    }

    /**
     * Whether a line for {@code reason} may be written now: -1 if not (it is counted as suppressed), otherwise how
     * many were suppressed since the last one written.
     */
    public long admit(String reason) {
        Window w = windows.computeIfAbsent(reason, r -> new Window());
        long now = clock.getAsLong();
        synchronized (w) {
            if (w.written && now - w.lastWrittenNanos < intervalNanos) {
                w.suppressed++;
                return -1;
            }
            long suppressed = w.suppressed;
            w.written = true;
            w.lastWrittenNanos = now;
            w.suppressed = 0;
            return suppressed;
        }
    }

    private String suffix(long suppressed) {
        return suppressed == 0 ? "" : " (" + suppressed + " more like it suppressed since the last such line)";
    }

    private static final class Window {
        boolean written;
        long lastWrittenNanos;
        long suppressed;
    }
}
