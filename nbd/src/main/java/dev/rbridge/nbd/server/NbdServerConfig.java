package dev.rbridge.nbd.server;

import dev.rbridge.common.Checks;

import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * Everything the NBD server needs, validated once when built; the defaults are the constants below. They bound what
 * one client can hold: connections (in all and per peer address), requests in flight per connection, payload memory
 * (in all, per peer, per connection) and time (to finish the handshake, to send a request whole, to read replies).
 */
public final class NbdServerConfig {
    /** A client gets this long from connecting to entering transmission. */
    public static final int HANDSHAKE_TIMEOUT_SECONDS = 10;
    public static final Duration HANDSHAKE_TIMEOUT = Duration.ofSeconds(HANDSHAKE_TIMEOUT_SECONDS);
    /** A request's header and payload must have arrived whole this long after its first byte. */
    public static final int REQUEST_TIMEOUT_SECONDS = 30;
    public static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(REQUEST_TIMEOUT_SECONDS);
    /** Replies may wait this long for a client that reads none of them before its connection is closed. */
    public static final int REPLY_TIMEOUT_SECONDS = 60;
    public static final Duration REPLY_TIMEOUT = Duration.ofSeconds(REPLY_TIMEOUT_SECONDS);
    /**
     * While connections wait for payload memory, one that holds memory and has been stalled this long (a payload it
     * does not send, replies it does not read) is closed to free it.
     */
    public static final Duration STALLED_GRACE = Duration.ofMillis(500);
    public static final int DRAIN_TIMEOUT_SECONDS = 10;
    public static final Duration DRAIN_TIMEOUT = Duration.ofSeconds(DRAIN_TIMEOUT_SECONDS);
    /**
     * Direct memory a transmission connection holds whatever it does: its read buffer (64 KiB) and reply header
     * space (16 KiB), with room for the JDK's own per-thread socket buffers.
     */
    public static final int DIRECT_BYTES_PER_CONNECTION = 128 << 10;
    /**
     * Direct memory a connection's TLS adds from the moment its STARTTLS is acknowledged, before any certificate or key
     * is checked, so any connection slot may hold it: TlsWire's four records in, eight out and one record's plaintext
     * (JSSE's records of 16709 bytes: 212 KiB), or PskTlsWire's 64 KiB; rounded up.
     */
    public static final int TLS_DIRECT_BYTES_PER_CONNECTION = 224 << 10;

    /** Direct memory one connection may hold whatever it does, with TLS offered ({@code tls}) or not. */
    public static long directBytesPerConnection(boolean tls) {
        return DIRECT_BYTES_PER_CONNECTION + (tls ? TLS_DIRECT_BYTES_PER_CONNECTION : 0);
    }
    public static final int MAX_CONNECTIONS = 1024;
    /** A quarter of the slots: one address cannot take them all, and a host with several devices has room. */
    public static final int MAX_CONNECTIONS_PER_PEER = 256;
    /** The kernel client keeps at most 128 requests per connection (its tag set); other clients fewer. */
    public static final int MAX_IN_FLIGHT_PER_CONNECTION = 1024;
    /** Payload buffers in use at once, all connections together. */
    public static final long PAYLOAD_BUDGET = 512L << 20;
    /**
     * READs from this size up are spliced (their data moved from the device's socket into the client's through a
     * pipe, without a copy in this process) where the device can and the connection is plain; below it the two
     * system calls a pipe costs outweigh the copy saved (bench/README.md, "forward-study.sh").
     */
    public static final int SPLICE_READS_FROM = 64 << 10;

    private final List<ListenAddress> listen;
    private final Map<String, Export> exports;
    private final List<Export> exportList;
    private final String defaultExport;
    private final Duration handshakeTimeout;
    private final Duration drainTimeout;
    private final Duration requestTimeout;
    private final Duration replyTimeout;
    private final Duration stalledGrace;
    private final int maxConnections;
    private final int maxConnectionsPerPeer;
    private final int maxInFlightPerConnection;
    private final long payloadBudget;
    private final long payloadBudgetPerPeer;
    private final long payloadBudgetPerConnection;
    private final long bufferPoolRetainBytes;
    private final NbdServerMetrics metrics;
    private final Consumer<SocketChannel> tcpSocketSetup;
    private final PayloadMemory payloadMemory;
    private final dev.rbridge.nbd.tls.NbdTls tls;

    private NbdServerConfig(Builder b) {
        if (b.listen.isEmpty()) {
            throw new IllegalArgumentException("the server needs at least one address to listen on");
        }
        if (b.exports.isEmpty()) {
            throw new IllegalArgumentException("the server needs at least one export");
        }
        this.listen = List.copyOf(b.listen);
        this.exports = Map.copyOf(b.exports);
        this.defaultExport = b.defaultExport != null ? b.defaultExport : b.exports.keySet().iterator().next();
        if (!exports.containsKey(defaultExport)) {
            throw new IllegalArgumentException(
                    "default export '" + defaultExport + "' is not one of " + b.exports.keySet());
        }
        this.handshakeTimeout = Checks.positive("handshake timeout", b.handshakeTimeout);
        this.drainTimeout = Checks.positive("drain timeout", b.drainTimeout);
        this.requestTimeout = Checks.positive("request timeout", b.requestTimeout);
        this.replyTimeout = Checks.positive("reply timeout", b.replyTimeout);
        this.stalledGrace = Checks.positive("stalled grace", b.stalledGrace);
        if (b.maxConnections < 1 || b.maxInFlightPerConnection < 1 || b.maxConnectionsPerPeer < 1) {
            throw new IllegalArgumentException("connection and in-flight limits must be at least 1");
        }
        this.maxConnections = b.maxConnections;
        this.maxConnectionsPerPeer = Math.min(b.maxConnectionsPerPeer, b.maxConnections);
        this.maxInFlightPerConnection = b.maxInFlightPerConnection;
        int largestPayload = b.exports.values().stream().mapToInt(Export::maximumPayload).max().orElse(0);
        if (b.payloadBudget < largestPayload) {
            throw new IllegalArgumentException("the payload memory budget (" + b.payloadBudget
                    + " bytes) must hold at least the largest maximum payload of an export (" + largestPayload + ")");
        }
        this.payloadBudget = b.payloadBudget;
        this.payloadBudgetPerPeer = b.payloadBudgetPerPeer > 0 ? Math.min(b.payloadBudgetPerPeer, b.payloadBudget)
                : b.payloadBudget / 2;
        this.payloadBudgetPerConnection = b.payloadBudgetPerConnection > 0
                ? Math.min(b.payloadBudgetPerConnection, payloadBudgetPerPeer)
                : payloadBudgetPerPeer / 2;
        this.bufferPoolRetainBytes = b.bufferPoolRetainBytes >= 0 ? b.bufferPoolRetainBytes : b.payloadBudget / 4;
        this.metrics = Objects.requireNonNull(b.metrics, "metrics");
        this.tcpSocketSetup = Objects.requireNonNull(b.tcpSocketSetup, "tcpSocketSetup");
        this.payloadMemory = Objects.requireNonNull(b.payloadMemory, "payloadMemory");
        this.tls = Objects.requireNonNull(b.tls, "tls");
        this.exportList = List.copyOf(b.exports.values()); // LinkedHashMap: configured order
    }

    public dev.rbridge.nbd.tls.NbdTls tls() {
        return tls;
    }

    public static Builder builder() {
        return new Builder();
    }

    public List<ListenAddress> listen() {
        return listen;
    }

    /** The export with this name; the empty name selects the default export. Null if there is none. */
    public Export export(String name) {
        return exports.get(name.isEmpty() ? defaultExport : name);
    }

    /** Exports in the order they were configured. */
    public List<Export> exports() {
        return exportList;
    }

    public String defaultExport() {
        return defaultExport;
    }

    public Duration handshakeTimeout() {
        return handshakeTimeout;
    }

    public Duration drainTimeout() {
        return drainTimeout;
    }

    public int maxConnections() {
        return maxConnections;
    }

    public int maxConnectionsPerPeer() {
        return maxConnectionsPerPeer;
    }

    public Duration requestTimeout() {
        return requestTimeout;
    }

    public Duration replyTimeout() {
        return replyTimeout;
    }

    public Duration stalledGrace() {
        return stalledGrace;
    }

    public long payloadBudget() {
        return payloadBudget;
    }

    public long payloadBudgetPerPeer() {
        return payloadBudgetPerPeer;
    }

    public long payloadBudgetPerConnection() {
        return payloadBudgetPerConnection;
    }

    public int maxInFlightPerConnection() {
        return maxInFlightPerConnection;
    }

    public long bufferPoolRetainBytes() {
        return bufferPoolRetainBytes;
    }

    public NbdServerMetrics metrics() {
        return metrics;
    }

    /** See {@link Builder#tcpSocketSetup}. */
    public Consumer<SocketChannel> tcpSocketSetup() {
        return tcpSocketSetup;
    }

    /** See {@link Builder#payloadMemory}. */
    public PayloadMemory payloadMemory() {
        return payloadMemory;
    }

    public static final class Builder {
        private final List<ListenAddress> listen = new ArrayList<>();
        private final Map<String, Export> exports = new LinkedHashMap<>();
        private String defaultExport;
        private Duration handshakeTimeout = HANDSHAKE_TIMEOUT;
        private Duration drainTimeout = DRAIN_TIMEOUT;
        private Duration requestTimeout = REQUEST_TIMEOUT;
        private Duration replyTimeout = REPLY_TIMEOUT;
        private Duration stalledGrace = STALLED_GRACE;
        private int maxConnections = MAX_CONNECTIONS;
        private int maxConnectionsPerPeer = MAX_CONNECTIONS_PER_PEER;
        private int maxInFlightPerConnection = MAX_IN_FLIGHT_PER_CONNECTION;
        private long payloadBudget = PAYLOAD_BUDGET;
        private long payloadBudgetPerPeer;
        private long payloadBudgetPerConnection;
        private long bufferPoolRetainBytes = -1;
        private NbdServerMetrics metrics = NbdServerMetrics.NONE;
        private Consumer<SocketChannel> tcpSocketSetup = ch -> {
        };
        private PayloadMemory payloadMemory = PayloadMemory.DIRECT;
        private dev.rbridge.nbd.tls.NbdTls tls = dev.rbridge.nbd.tls.NbdTls.OFF;

        /** TLS: off (the default), offered (on), or required; see {@link dev.rbridge.nbd.tls.TlsMode}. */
        public Builder tls(dev.rbridge.nbd.tls.NbdTls tls) {
            this.tls = Objects.requireNonNull(tls);
            return this;
        }

        /** The TLS settings given so far: what the connections' memory is sized with. */
        public dev.rbridge.nbd.tls.NbdTls tls() {
            return tls;
        }

        public Builder listen(ListenAddress address) {
            listen.add(Objects.requireNonNull(address));
            return this;
        }

        public Builder export(Export export) {
            if (exports.putIfAbsent(export.name(), export) != null) {
                throw new IllegalArgumentException("export '" + export.name() + "' is configured twice");
            }
            return this;
        }

        public Builder defaultExport(String name) {
            this.defaultExport = name;
            return this;
        }

        public Builder handshakeTimeout(Duration d) {
            this.handshakeTimeout = d;
            return this;
        }

        public Builder drainTimeout(Duration d) {
            this.drainTimeout = d;
            return this;
        }

        public Builder maxConnections(int n) {
            this.maxConnections = n;
            return this;
        }

        /**
         * Connections from one address at once. When a new one would pass this (or {@link #maxConnections}), the
         * longest-idle connection of that address (of the address holding the most, for the global limit) is closed
         * to make room; when none is idle the new one is refused.
         */
        public Builder maxConnectionsPerPeer(int n) {
            this.maxConnectionsPerPeer = n;
            return this;
        }

        public Builder requestTimeout(Duration d) {
            this.requestTimeout = d;
            return this;
        }

        public Builder replyTimeout(Duration d) {
            this.replyTimeout = d;
            return this;
        }

        public Builder stalledGrace(Duration d) {
            this.stalledGrace = d;
            return this;
        }

        /**
         * Payload memory in use at once by all connections; by default half of it may go to one address and a
         * quarter to one connection (a request larger than its share still passes when it would be the only one).
         */
        public Builder payloadBudget(long bytes) {
            this.payloadBudget = bytes;
            return this;
        }

        /** Payload memory one address's connections may hold together; default half the budget. */
        public Builder payloadBudgetPerPeer(long bytes) {
            this.payloadBudgetPerPeer = bytes;
            return this;
        }

        /** Payload memory one connection may hold; default half the per-peer share. */
        public Builder payloadBudgetPerConnection(long bytes) {
            this.payloadBudgetPerConnection = bytes;
            return this;
        }

        public Builder maxInFlightPerConnection(int n) {
            this.maxInFlightPerConnection = n;
            return this;
        }

        /**
         * Idle buffers kept for reuse, beyond the budget in use; default a quarter of the budget. Whole idle blocks
         * beyond it are given back about once a second (see {@link BufferPool}).
         */
        public Builder bufferPoolRetainBytes(long bytes) {
            this.bufferPoolRetainBytes = bytes;
            return this;
        }

        public Builder metrics(NbdServerMetrics metrics) {
            this.metrics = metrics;
            return this;
        }

        /**
         * Called with each accepted TCP connection (not Unix-socket ones) before it is served, after the server's own
         * options (TCP_NODELAY, SO_KEEPALIVE): where the embedding application tunes its sockets (rbridge chooses
         * their congestion control there). It must not throw; by default it does nothing.
         */
        public Builder tcpSocketSetup(Consumer<SocketChannel> setup) {
            this.tcpSocketSetup = setup;
            return this;
        }

        /**
         * Where payload buffers' memory comes from (default {@link PayloadMemory#DIRECT}): the embedding application
         * registers it there when its transport moves data straight from and into those buffers.
         */
        public Builder payloadMemory(PayloadMemory memory) {
            this.payloadMemory = memory;
            return this;
        }

        public NbdServerConfig build() {
            return new NbdServerConfig(this);
        }
    }
}
