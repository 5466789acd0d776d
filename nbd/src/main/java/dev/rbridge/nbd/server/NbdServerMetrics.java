package dev.rbridge.nbd.server;

import dev.rbridge.nbd.protocol.Errno;

/**
 * What the server reports about itself. Implementations bind this to a registry at the edge (the core never imports
 * one). {@link #export} is asked once per connection as it enters transmission, so the per-request calls on the
 * returned {@link ExportMetrics} need no lookup by name; those run on the I/O path and must be cheap and thread-safe.
 */
public interface NbdServerMetrics {
    NbdServerMetrics NONE = new NbdServerMetrics() {
    };

    /** The recorder for one export; may be shared by every connection to it. */
    default ExportMetrics export(String export) {
        return ExportMetrics.NONE;
    }

    /** A session ended because the peer broke the protocol (garbage, bad magic, ...). */
    default void protocolViolation() {
    }

    /** Per-export events. */
    interface ExportMetrics {
        ExportMetrics NONE = new ExportMetrics() {
        };

        default void connectionOpened() {
        }

        default void connectionClosed() {
        }

        /** A request was decoded and is now in flight (until {@link #requestCompleted}). */
        default void requestStarted(int command) {
        }

        /**
         * @param command NBD command number
         * @param bytes   payload bytes moved (READ and WRITE), else 0
         * @param error   null on success
         */
        default void requestCompleted(int command, long bytes, long nanos, Errno error) {
        }
    }
}
