package dev.rbridge.bridge.memservers;

import java.util.Locale;

/**
 * Remote operations of the data path on one memserver (rebuild copies are counted by the rebuilder instead). Called
 * once per operation from its completion, so it must be cheap and thread-safe.
 */
public interface RemoteOpMetrics {
    RemoteOpMetrics NONE = (op, bytes, nanos, failed) -> {
    };

    enum Op {
        READ, WRITE, ZERO;

        /** The label value. */
        public String label() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    /**
     * @param bytes  bytes read or written, or the length zeroed
     * @param nanos  from issue to completion
     * @param failed true when it completed with an error (timeout, connection lost, refused)
     */
    void completed(Op op, long bytes, long nanos, boolean failed);
}
