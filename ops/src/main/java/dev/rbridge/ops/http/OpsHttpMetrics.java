package dev.rbridge.ops.http;

/**
 * What the ops HTTP server reports, bound to a registry outside this module (the bridge's Micrometer binding), as
 * the other modules' metrics interfaces are. Called from the server's threads; implementations must be cheap and
 * thread-safe.
 */
public interface OpsHttpMetrics {
    OpsHttpMetrics NONE = new OpsHttpMetrics() {
        @Override
        public void refused(Refusal reason) {}
    };

    /** A peer was refused, cut off or evicted. */
    void refused(Refusal reason);
}
