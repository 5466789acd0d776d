package dev.rbridge.nbd.server;

import dev.rbridge.nbd.protocol.Errno;

/**
 * What the server reports about itself. Implementations bind this to a registry at the edge (the core never imports
 * one) and must be cheap and thread-safe: {@link #requestCompleted} runs once per request on the I/O path.
 */
public interface NbdServerMetrics {
    NbdServerMetrics NONE = new NbdServerMetrics() {
    };

    default void connectionOpened(String export) {
    }

    default void connectionClosed(String export) {
    }

    /** A session ended because the peer broke the protocol (garbage, bad magic, ...). */
    default void protocolViolation() {
    }

    /**
     * @param command NBD command number
     * @param bytes   payload bytes moved (READ and WRITE), else the request length
     * @param error   null on success
     */
    default void requestCompleted(String export, int command, long bytes, long nanos, Errno error) {
    }
}
