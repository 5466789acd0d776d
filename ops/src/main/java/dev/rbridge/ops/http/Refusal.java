package dev.rbridge.ops.http;

import java.util.Locale;

/**
 * Why the ops HTTP server turned a peer away or cut it off. Each is counted ({@link OpsHttpMetrics#refused}) and
 * logged at most once per reason every few seconds; the metric label is {@link #label()}.
 */
public enum Refusal {
    /** A new connection met the global cap and no connection could be evicted for it (503). */
    CONNECTION_LIMIT,
    /** A new connection met its peer address's cap and none of that peer's could be evicted (503). */
    PEER_LIMIT,
    /** An idle or half-sent connection, or one stalling its answer, closed to make room for a new one. */
    EVICTED,
    /** A connection that never sent a request closed after the idle timeout. */
    IDLE_TIMEOUT,
    /** A request that did not arrive whole within the request timeout (408). */
    REQUEST_TIMEOUT,
    /** A response the peer did not take within the write timeout. */
    WRITE_TIMEOUT,
    /** Bytes that are not an HTTP/1.x request (400). */
    MALFORMED,
    /** A request line, header block or body over its limit (414, 431, 413). */
    TOO_LARGE,
    /** A chunked body or an HTTP version other than 1.0 and 1.1 (501, 505). */
    UNSUPPORTED,
    /** Every worker busy and the queue full (503). */
    BUSY,
    /** No such path (404). */
    NOT_FOUND,
    /** A method the path does not answer, such as GET on an operation that changes state (405). */
    METHOD,
    /** A request sent by a web page: an Origin or Sec-Fetch-Site header (403). */
    BROWSER,
    /** A Host that is not a loopback name on a loopback connection: DNS rebinding (403). */
    HOST,
    /** A token-protected request from a peer that is not on loopback: the token would cross the network in clear (403). */
    TOKEN_OFF_LOOPBACK,
    /** A wrong or missing token (401). */
    UNAUTHORIZED,
    /** An operation that changes state on a server with no token configured (403). */
    MUTATIONS_OFF,
    /** The handler failed (500). */
    INTERNAL_ERROR,
    /** The handler gave no answer within the handler timeout (503); its worker is written off. */
    HANDLER_TIMEOUT;

    /** The metric label: the name in snake_case. */
    public String label() {
        return name().toLowerCase(Locale.ROOT);
    }
}
