package dev.rbridge.ops.http;

import java.net.InetSocketAddress;
import java.time.Duration;

/**
 * One ops HTTP server's settings, validated once. The defaults are sized for what these servers do (a scrape every
 * few seconds, an operator's command, probes) and for what a hostile peer can hold: at most
 * {@code maxConnections x (request line + header bytes + body)} ({@link RequestLimits}), about 2.5 MiB, of buffers
 * per server.
 */
public final class OpsHttpConfig {
    /** Far above what Prometheus, probes and operators open at once, low enough that buffers stay small. */
    public static final int MAX_CONNECTIONS = 64;
    /** A quarter of the slots: a peer address cannot take them all; one that tries evicts its own oldest. */
    public static final int MAX_CONNECTIONS_PER_PEER = 16;
    /** Answers are computed in microseconds to milliseconds; two threads keep a slow one from stalling the rest. */
    public static final int WORKERS = 2;
    /** Complete requests waiting for a worker; beyond this, 503 at once rather than a growing backlog. */
    public static final int QUEUE = 32;
    /**
     * From a complete request to its answer, queueing included. Handlers answer in milliseconds; one that takes
     * this long is stuck (a bug, a lock, a call that never returns), and its peer gets a 503 rather than waiting
     * for ever. Above the 10 s scrape timeout of Prometheus and the patience of an operator's curl, so it cuts
     * only what nobody still waits for.
     */
    public static final Duration HANDLER_TIMEOUT = Duration.ofSeconds(30);
    /** Our longest target is a volume name inside a path; 8 KiB is the limit most servers apply. */
    public static final int MAX_REQUEST_LINE = 8 << 10;
    public static final int MAX_HEADER_BYTES = 16 << 10;
    public static final int MAX_HEADERS = 64;
    /** No operation takes a body today; a small one is read (and ignored) rather than refused. */
    public static final int MAX_BODY = 16 << 10;
    /** From a request's first byte to its last: a client on a slow link sends a few hundred bytes well within it. */
    public static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(10);
    /**
     * A connection waiting for its first or next request. Above Prometheus's default 15 s scrape interval would
     * keep its connection open between scrapes, but a freed slot matters more than a saved handshake on loopback.
     */
    public static final Duration IDLE_TIMEOUT = Duration.ofSeconds(10);
    /** An answer the peer does not read; /metrics is the largest, some 100 KiB, which fits in socket buffers. */
    public static final Duration WRITE_TIMEOUT = Duration.ofSeconds(10);
    /**
     * An answer of which the peer has taken nothing for this long is stalled, and its connection may be evicted for
     * a newcomer at a cap; one the peer keeps taking, however slowly, is being answered and keeps its slot (the write
     * timeout still bounds the whole answer). A reader that is merely slow takes something many times a second.
     */
    public static final Duration WRITE_STALL = Duration.ofSeconds(1);
    /**
     * After an error answer the server stops writing and reads (and drops) what the client still sends for this
     * long before closing, so the client reads the answer instead of a reset.
     */
    public static final Duration LINGER = Duration.ofSeconds(2);

    private final String name;
    private final InetSocketAddress address;
    private final ErrorPage errorPage;
    private final int maxConnections;
    private final int maxConnectionsPerPeer;
    private final int workers;
    private final int queue;
    private final RequestLimits requestLimits;
    private final Duration requestTimeout;
    private final Duration idleTimeout;
    private final Duration writeTimeout;
    private final Duration writeStall;
    private final Duration linger;
    private final Duration handlerTimeout;

    private OpsHttpConfig(Builder b) {
        this.name = b.name;
        this.address = b.address;
        this.errorPage = b.errorPage;
        this.maxConnections = b.maxConnections;
        this.maxConnectionsPerPeer = b.maxConnectionsPerPeer;
        this.workers = b.workers;
        this.queue = b.queue;
        this.requestLimits = b.requestLimits;
        this.requestTimeout = b.requestTimeout;
        this.idleTimeout = b.idleTimeout;
        this.writeTimeout = b.writeTimeout;
        this.writeStall = b.writeStall;
        this.linger = b.linger;
        this.handlerTimeout = b.handlerTimeout;
    }

    /**
     * @param name    names the threads and log lines ({@code metrics}, {@code admin}); also the metric's label
     * @param address where to listen (port 0: any free port)
     */
    public static Builder builder(String name, InetSocketAddress address) {
        return new Builder(name, address);
    }

    public String name() {
        return name;
    }

    public InetSocketAddress address() {
        return address;
    }

    public ErrorPage errorPage() {
        return errorPage;
    }

    public int maxConnections() {
        return maxConnections;
    }

    public int maxConnectionsPerPeer() {
        return maxConnectionsPerPeer;
    }

    public int workers() {
        return workers;
    }

    public int queue() {
        return queue;
    }

    public RequestLimits requestLimits() {
        return requestLimits;
    }

    public Duration requestTimeout() {
        return requestTimeout;
    }

    public Duration idleTimeout() {
        return idleTimeout;
    }

    public Duration writeTimeout() {
        return writeTimeout;
    }

    public Duration writeStall() {
        return writeStall;
    }

    public Duration linger() {
        return linger;
    }

    public Duration handlerTimeout() {
        return handlerTimeout;
    }

    public static final class Builder {
        private final String name;
        private final InetSocketAddress address;
        private ErrorPage errorPage = ErrorPage.TEXT;
        private int maxConnections = MAX_CONNECTIONS;
        private int maxConnectionsPerPeer = MAX_CONNECTIONS_PER_PEER;
        private int workers = WORKERS;
        private int queue = QUEUE;
        private RequestLimits requestLimits = new RequestLimits(MAX_REQUEST_LINE, MAX_HEADER_BYTES, MAX_HEADERS,
                MAX_BODY);
        private Duration requestTimeout = REQUEST_TIMEOUT;
        private Duration idleTimeout = IDLE_TIMEOUT;
        private Duration writeTimeout = WRITE_TIMEOUT;
        private Duration writeStall = WRITE_STALL;
        private Duration linger = LINGER;
        private Duration handlerTimeout = HANDLER_TIMEOUT;

        private Builder(String name, InetSocketAddress address) {
            this.name = name;
            this.address = address;
        }

        public Builder errorPage(ErrorPage page) {
            this.errorPage = page;
            return this;
        }

        public Builder maxConnections(int global, int perPeer) {
            this.maxConnections = global;
            this.maxConnectionsPerPeer = perPeer;
            return this;
        }

        public Builder workers(int workers, int queue) {
            this.workers = workers;
            this.queue = queue;
            return this;
        }

        public Builder limits(RequestLimits limits) {
            this.requestLimits = limits;
            return this;
        }

        public Builder timeouts(Duration request, Duration idle, Duration write, Duration linger) {
            this.requestTimeout = request;
            this.idleTimeout = idle;
            this.writeTimeout = write;
            this.linger = linger;
            return this;
        }

        public Builder writeStall(Duration stall) {
            this.writeStall = stall;
            return this;
        }

        public Builder handlerTimeout(Duration timeout) {
            this.handlerTimeout = timeout;
            return this;
        }

        /** @throws IllegalArgumentException naming the setting that is out of range */
        public OpsHttpConfig build() {
            if (name == null || !name.matches("[a-z0-9-]+")) {
                throw new IllegalArgumentException("server name must be lower-case letters, digits and dashes: "
                        + name);
            }
            if (address == null || errorPage == null || requestLimits == null) {
                throw new IllegalArgumentException("an ops HTTP server needs an address, an error page and request"
                        + " limits");
            }
            if (maxConnections < 1 || maxConnectionsPerPeer < 1 || maxConnectionsPerPeer > maxConnections) {
                throw new IllegalArgumentException("connection caps must be at least 1 with per-peer <= global: "
                        + maxConnections + " global, " + maxConnectionsPerPeer + " per peer");
            }
            if (workers < 1 || queue < 1) {
                throw new IllegalArgumentException("workers and queue must be at least 1: " + workers + ", " + queue);
            }
            RequestLimits l = requestLimits;
            if (l.requestLine() < 64 || l.headerBytes() < 64 || l.headers() < 1 || l.body() < 0) {
                throw new IllegalArgumentException("request limits too small to carry a request: line "
                        + l.requestLine() + ", headers " + l.headerBytes() + " bytes / " + l.headers() + ", body "
                        + l.body());
            }
            for (Duration d : new Duration[]{requestTimeout, idleTimeout, writeTimeout, writeStall, linger,
                    handlerTimeout}) {
                if (d == null || d.isNegative() || d.isZero()) {
                    throw new IllegalArgumentException("timeouts must be positive: request " + requestTimeout
                            + ", idle " + idleTimeout + ", write " + writeTimeout + ", write stall " + writeStall
                            + ", linger " + linger + ", handler " + handlerTimeout);
                }
            }
            return new OpsHttpConfig(this);
        }
    }
}
