package dev.rbridge.nbd.server;

import org.slf4j.Logger;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * Warnings that a peer can cause (refusals, evictions, protocol violations) are logged at most a few times per
 * interval for each kind, so a flood of them cannot fill the disk; the next line that gets through says how many
 * were left out.
 */
final class LogLimiter {
    private static final long WINDOW_NANOS = TimeUnit.SECONDS.toNanos(10);
    private static final int PER_WINDOW = 5;

    private final Logger log;
    private final ConcurrentHashMap<String, Window> windows = new ConcurrentHashMap<>();

    LogLimiter(Logger log) {
        this.log = log;
    }

    private static final class Window {
        long start;
        int logged;
        long suppressed;
    }

    /** Logs at WARN unless {@code kind} was logged {@value #PER_WINDOW} times in the last ten seconds. */
    void warn(String kind, String format, Object... args) {
        Window w = windows.computeIfAbsent(kind, k -> new Window());
        long now = System.nanoTime();
        long left;
        synchronized (w) {
            if (now - w.start > WINDOW_NANOS) {
                w.start = now;
                w.logged = 0;
            }
            if (w.logged >= PER_WINDOW) {
                w.suppressed++;
                return;
            }
            w.logged++;
            left = w.suppressed;
            w.suppressed = 0;
        }
        if (left > 0) {
            log.warn("({} similar message(s) of kind '{}' left out in the last ten seconds)", left, kind);
        }
        log.warn(format, args);
    }
}
