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

    /**
     * TLS turned something away: {@code tls_required} (an option asked in clear where TLS is required), {@code
     * handshake_failed} (no common protocol or cipher, a client certificate missing or not trusted, garbage).
     */
    default void tlsRefused(String reason) {}

    /** A session ended because the peer broke the protocol (garbage, bad magic, ...). */
    default void protocolViolation() {}

    /**
     * The server turned a new connection away ({@code connection_limit}: every slot busy; {@code peer_limit}: its
     * address has its share and none of them idle).
     */
    default void connectionRefused(String reason) {}

    /**
     * The server closed a connection: {@code handshake_timeout}, {@code request_timeout} (a request not sent whole
     * in time), {@code reply_timeout} (replies left unread), {@code idle_evicted} (its slot went to a new connection),
     * {@code stalled_evicted} (its payload memory went to connections waiting for it).
     */
    default void connectionClosed(String reason) {}

    /** Called once when the server starts, with the figures a binding reads when scraped. */
    default void serverStarted(NbdServerState state) {}

    /** Per-export events. */
    interface ExportMetrics {
        ExportMetrics NONE = new ExportMetrics() {
        };

        default void connectionOpened() {}

        default void connectionClosed() {}

        /** A request was decoded and is now in flight (until {@link #requestCompleted}). */
        default void requestStarted(int command) {}

        /**
         * @param command NBD command number
         * @param bytes   payload bytes moved (READ and WRITE), else 0
         * @param error   null on success
         */
        default void requestCompleted(int command, long bytes, long nanos, Errno error) {}
    }
}
