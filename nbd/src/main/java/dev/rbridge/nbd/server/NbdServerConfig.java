package dev.rbridge.nbd.server;

import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * Everything the NBD server needs, validated once when built. Defaults suit a local block device: a client gets 30 s to
 * finish its handshake, a shutdown waits up to 10 s for in-flight requests.
 */
public final class NbdServerConfig {
    private final List<ListenAddress> listen;
    private final Map<String, Export> exports;
    private final List<Export> exportList;
    private final String defaultExport;
    private final Duration handshakeTimeout;
    private final Duration drainTimeout;
    private final int maxConnections;
    private final int maxInFlightPerConnection;
    private final long bufferPoolRetainBytes;
    private final NbdServerMetrics metrics;
    private final Consumer<SocketChannel> tcpSocketSetup;

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
            throw new IllegalArgumentException("default export '" + defaultExport + "' is not one of " + b.exports.keySet());
        }
        this.handshakeTimeout = positive("handshake timeout", b.handshakeTimeout);
        this.drainTimeout = positive("drain timeout", b.drainTimeout);
        if (b.maxConnections < 1 || b.maxInFlightPerConnection < 1) {
            throw new IllegalArgumentException("connection and in-flight limits must be at least 1");
        }
        this.maxConnections = b.maxConnections;
        this.maxInFlightPerConnection = b.maxInFlightPerConnection;
        this.bufferPoolRetainBytes = b.bufferPoolRetainBytes;
        this.metrics = Objects.requireNonNull(b.metrics, "metrics");
        this.tcpSocketSetup = Objects.requireNonNull(b.tcpSocketSetup, "tcpSocketSetup");
        this.exportList = List.copyOf(b.exports.values()); // LinkedHashMap: configured order
    }

    private static Duration positive(String what, Duration d) {
        if (d == null || d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(what + " must be positive");
        }
        return d;
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

    public static final class Builder {
        private final List<ListenAddress> listen = new ArrayList<>();
        private final Map<String, Export> exports = new LinkedHashMap<>();
        private String defaultExport;
        private Duration handshakeTimeout = Duration.ofSeconds(30);
        private Duration drainTimeout = Duration.ofSeconds(10);
        private int maxConnections = 1024;
        private int maxInFlightPerConnection = 1024;
        private long bufferPoolRetainBytes = 256L << 20;
        private NbdServerMetrics metrics = NbdServerMetrics.NONE;
        private Consumer<SocketChannel> tcpSocketSetup = ch -> {
        };

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

        public Builder maxInFlightPerConnection(int n) {
            this.maxInFlightPerConnection = n;
            return this;
        }

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

        public NbdServerConfig build() {
            return new NbdServerConfig(this);
        }
    }
}
