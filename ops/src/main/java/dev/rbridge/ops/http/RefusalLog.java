package dev.rbridge.ops.http;

import dev.rbridge.common.RateLimitedLog;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.concurrent.TimeUnit;

/**
 * How one server tells of what its peers cause: every refusal counted by reason ({@link OpsHttpMetrics}) and, like
 * the server's other troubles a peer can repeat, logged at most once per reason every 10 s ({@link RateLimitedLog})
 * with the server's name in front. Thread-safe: the selector thread and the workers share it.
 */
final class RefusalLog {
    /** The server's one logger, named for {@link OpsHttpServer} as operators configure it. */
    private static final Logger log = LoggerFactory.getLogger(OpsHttpServer.class);

    private final String prefix;
    private final OpsHttpMetrics metrics;
    private final RateLimitedLog limited = new RateLimitedLog(log, TimeUnit.SECONDS.toNanos(10), System::nanoTime);

    RefusalLog(String serverName, OpsHttpMetrics metrics) {
        this.prefix = "ops http " + serverName + ": ";
        this.metrics = metrics;
    }

    /** Counts the refusal and logs {@code message}. */
    void refused(Refusal reason, String message) {
        metrics.refused(reason);
        limited.warn(reason.label(), "{}", prefix + message);
    }

    /** Counts the refusal only: its caller logs it in full. */
    void counted(Refusal reason) {
        metrics.refused(reason);
    }

    void warn(String reason, String message) {
        limited.warn(reason, "{}", prefix + message);
    }

    void warn(String reason, String message, Throwable cause) {
        limited.warn(reason, "{}", prefix + message, cause);
    }

    void error(String reason, String message) {
        limited.error(reason, "{}", prefix + message);
    }
}
