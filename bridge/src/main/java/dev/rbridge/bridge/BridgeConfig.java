package dev.rbridge.bridge;

import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.common.Checks;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Lease;

import java.io.IOException;
import java.net.InetAddress;
import javax.net.ssl.SSLContext;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.UUID;

/**
 * Everything the bridge core needs, validated once (HikariCP style). Defaults: 5 s operation timeout, a 10 s lease
 * renewed every third of it, up to 10 s at start to reach every memserver, rebuilds copying 1 MiB at a time, one
 * tcp lane (TCP connection) to each memserver per two CPUs of this host, at most four; reads not hedged.
 */
public final class BridgeConfig {
    private final List<InetSocketAddress> memservers;
    private final List<VolumeSpec> volumes;
    private final String transport;
    private final String token;
    private final SSLContext memserverTls;
    private final boolean allowShrink;
    private final boolean hedgeReads;
    private final boolean spliceReads;
    private final String owner;
    private final Duration operationTimeout;
    private final Duration leaseTtl;
    private final Duration startWait;
    private final int rebuildChunk;
    private final long rebuildRate;
    private final int lanes;
    private final String tcpCongestion;
    private final BridgeMetrics metrics;
    private final List<InetSocketAddress> memserverNames;

    private BridgeConfig(Builder b) {
        if (b.memservers.isEmpty() && b.memserverNames.isEmpty()) {
            throw new IllegalArgumentException("the bridge needs at least one memserver (--memserver HOST:PORT, or"
                    + " --memserver-dns NAME:PORT)");
        }
        if (b.volumes.isEmpty()) {
            throw new IllegalArgumentException("the bridge needs at least one volume (--volume name=disk,size=1G)");
        }
        if (new HashSet<>(b.memservers).size() != b.memservers.size()) {
            throw new IllegalArgumentException("a memserver is listed twice: " + b.memservers);
        }
        Set<String> names = new HashSet<>();
        for (VolumeSpec v : b.volumes) {
            if (!names.add(v.name())) {
                throw new IllegalArgumentException("volume '" + v.name() + "' is configured twice");
            }
            if (b.memserverNames.isEmpty() && v.replicas() > b.memservers.size()) {
                throw new IllegalArgumentException("volume '" + v.name() + "' wants " + v.replicas()
                        + " replicas but only " + b.memservers.size() + " memserver(s) are configured; replicas of a"
                        + " slab never share a memserver");
            }
        }
        this.memservers = List.copyOf(b.memservers);
        this.memserverNames = List.copyOf(b.memserverNames);
        this.volumes = List.copyOf(b.volumes);
        this.transport = Objects.requireNonNull(b.transport);
        this.token = b.token == null ? "" : b.token;
        this.memserverTls = b.memserverTls;
        this.allowShrink = b.allowShrink;
        this.hedgeReads = b.hedgeReads;
        this.spliceReads = b.spliceReads;
        this.owner = Objects.requireNonNull(b.owner, "owner");
        this.operationTimeout = Checks.positive("operation timeout", b.operationTimeout);
        this.leaseTtl = Checks.positive("lease", b.leaseTtl);
        if (leaseTtl.compareTo(Duration.ofSeconds(1)) < 0) {
            throw new IllegalArgumentException("the lease must be at least 1 s");
        }
        if (leaseTtl.compareTo(Lease.MAX_TTL) > 0) {
            throw new IllegalArgumentException("the lease must be at most " + Lease.MAX_TTL.toSeconds()
                    + " s (memservers refuse longer ones): " + leaseTtl.toSeconds() + " s");
        }
        this.startWait = b.startWait.isNegative() ? Duration.ZERO : b.startWait;
        if (Integer.bitCount(b.rebuildChunk) != 1 || b.rebuildChunk < 4096 || b.rebuildChunk > (16 << 20)) {
            throw new IllegalArgumentException("rebuild chunk must be a power of two from 4K to 16M");
        }
        this.rebuildChunk = b.rebuildChunk;
        if (b.rebuildRate != 0 && b.rebuildRate < 1 << 20) {
            throw new IllegalArgumentException("the rebuild rate must be at least 1M a second (or 0 for no limit): "
                    + b.rebuildRate);
        }
        this.rebuildRate = b.rebuildRate;
        if (b.lanes < 1 || b.lanes > ConnectParams.MAX_LANES) {
            throw new IllegalArgumentException("lanes must be between 1 and " + ConnectParams.MAX_LANES
                    + ": " + b.lanes);
        }
        this.lanes = b.lanes;
        this.tcpCongestion = ConnectParams.checkCongestion(b.tcpCongestion);
        this.metrics = Objects.requireNonNull(b.metrics, "metrics");
    }

    public static Builder builder() {
        return new Builder();
    }

    /**
     * DNS names (unresolved {@code NAME:PORT}) each of whose addresses is a memserver: resolved at start and every
     * {@link #DNS_INTERVAL} after, so memservers come and go with the name (a Kubernetes headless Service).
     */
    public List<InetSocketAddress> memserverNames() {
        return memserverNames;
    }

    /**
     * How often {@link #memserverNames} are resolved again (the JVM's own cache may hold an answer longer): 10 s; the
     * system property {@code rbridge.dnsIntervalSeconds} sets it for tests that wait for resolutions (at least 1 s: a
     * zero or negative value would resolve on every health tick).
     */
    public static final java.time.Duration DNS_INTERVAL = java.time.Duration.ofSeconds(
            Math.max(1, Long.getLong("rbridge.dnsIntervalSeconds", 10)));

    public List<InetSocketAddress> memservers() {
        return memservers;
    }

    public List<VolumeSpec> volumes() {
        return volumes;
    }

    public String transport() {
        return transport;
    }

    public String token() {
        return token;
    }

    /** Who this bridge is in the memservers' leases; unique per process by default. */
    public String owner() {
        return owner;
    }

    public Duration operationTimeout() {
        return operationTimeout;
    }

    public Duration leaseTtl() {
        return leaseTtl;
    }

    public Duration startWait() {
        return startWait;
    }

    public int rebuildChunk() {
        return rebuildChunk;
    }

    /** The most a second the rebuilds copy (bytes), 0 for no limit. */
    public long rebuildRate() {
        return rebuildRate;
    }

    /** Connections per memserver on transports that use several (tcp); see ConnectParams#lanes. */
    public int lanes() {
        return lanes;
    }

    /** TCP congestion control of tcp-transport connections; see ConnectParams#tcpCongestion. */
    public String tcpCongestion() {
        return tcpCongestion;
    }

    /**
     * Whether a volume configured smaller than the memservers hold it may start, releasing the slabs past its new
     * end; without it such a start is refused, naming them.
     */
    public boolean allowShrink() {
        return allowShrink;
    }

    /**
     * Whether small reads of slabs with two or more live replicas are hedged: sent to a second replica when the first
     * has not answered within the volume's hedge delay (see volume.ReadHedger). Off by default.
     */
    public boolean hedgeReads() {
        return hedgeReads;
    }

    /**
     * Whether large reads over plain tcp are spliced: their data moved from the memserver's socket into the client's
     * through a pipe, with no copy in the bridge. On by default; it never applies with TLS on either side.
     */
    public boolean spliceReads() {
        return spliceReads;
    }

    /** TLS to the memservers (ConnectParams#tls), or null: in clear. */
    public SSLContext memserverTls() {
        return memserverTls;
    }

    public BridgeMetrics metrics() {
        return metrics;
    }

    /** This configuration reporting to {@code m} instead. */
    public BridgeConfig withMetrics(BridgeMetrics m) {
        Builder b = new Builder();
        memservers.forEach(b::memserver);
        memserverNames.forEach(b::memserverName);
        volumes.forEach(b::volume);
        return b.transport(transport).token(token.isEmpty() ? null : token).owner(owner)
                .operationTimeout(operationTimeout).leaseTtl(leaseTtl).startWait(startWait).rebuildChunk(rebuildChunk)
                .rebuildRate(rebuildRate).lanes(lanes).tcpCongestion(tcpCongestion).memserverTls(memserverTls)
                .allowShrink(allowShrink)
                .hedgeReads(hedgeReads)
                .spliceReads(spliceReads).metrics(m).build();
    }

    public static final class Builder {
        private final List<InetSocketAddress> memservers = new ArrayList<>();
        private final List<InetSocketAddress> memserverNames = new ArrayList<>();
        private final List<VolumeSpec> volumes = new ArrayList<>();
        private String transport = "tcp";
        private String token;
        private SSLContext memserverTls;
        private boolean allowShrink;
        private boolean hedgeReads;
        private boolean spliceReads = true;
        private String owner = defaultOwner();
        private Duration operationTimeout = Duration.ofSeconds(5);
        private Duration leaseTtl = Duration.ofSeconds(10);
        private Duration startWait = Duration.ofSeconds(10);
        private int rebuildChunk = 1 << 20;
        private long rebuildRate;
        private int lanes = defaultLanes();
        private String tcpCongestion = ConnectParams.TCP_CONGESTION_DEFAULT;
        private BridgeMetrics metrics = BridgeMetrics.NONE;

        public Builder memserver(InetSocketAddress a) {
            memservers.add(Objects.requireNonNull(a));
            return this;
        }

        /** A DNS name whose every address is a memserver at {@code name}'s port (see memserverNames()). */
        public Builder memserverName(InetSocketAddress name) {
            memserverNames.add(InetSocketAddress.createUnresolved(name.getHostString(), name.getPort()));
            return this;
        }

        public Builder volume(VolumeSpec v) {
            volumes.add(Objects.requireNonNull(v));
            return this;
        }

        public Builder transport(String t) {
            this.transport = t;
            return this;
        }

        public Builder token(String t) {
            this.token = t;
            return this;
        }

        /** Let a volume start smaller than the memservers hold it, releasing what lies past its end. */
        public Builder allowShrink(boolean allow) {
            this.allowShrink = allow;
            return this;
        }

        /** Hedge small reads of replicated slabs, or not (the default). */
        public Builder hedgeReads(boolean hedge) {
            this.hedgeReads = hedge;
            return this;
        }

        /** Splice large reads over plain tcp (the default), or copy them. */
        public Builder spliceReads(boolean splice) {
            this.spliceReads = splice;
            return this;
        }

        /** TLS to the memservers; null (the default): in clear. */
        public Builder memserverTls(SSLContext context) {
            this.memserverTls = context;
            return this;
        }

        public Builder owner(String o) {
            this.owner = o;
            return this;
        }

        public Builder operationTimeout(Duration d) {
            this.operationTimeout = d;
            return this;
        }

        public Builder leaseTtl(Duration d) {
            this.leaseTtl = d;
            return this;
        }

        public Builder startWait(Duration d) {
            this.startWait = Objects.requireNonNull(d);
            return this;
        }

        public Builder rebuildChunk(int bytes) {
            this.rebuildChunk = bytes;
            return this;
        }

        /** The most a second the rebuilds copy, in bytes; 0 (the default) for no limit. */
        public Builder rebuildRate(long bytesPerSecond) {
            this.rebuildRate = bytesPerSecond;
            return this;
        }

        public Builder lanes(int n) {
            this.lanes = n;
            return this;
        }

        public Builder tcpCongestion(String algorithm) {
            this.tcpCongestion = algorithm;
            return this;
        }

        public Builder metrics(BridgeMetrics m) {
            this.metrics = m;
            return this;
        }

        public BridgeConfig build() {
            return new BridgeConfig(this);
        }

        /**
         * One lane per two CPUs, at most four. Raw provider transfers gain from more lanes (one memserver thread serves
         * each), but through the bridge on a small host, where the client, bridge and memserver share the cores, extra
         * lanes only pay with cores to run them (bench/README.md, the lanes runs of fio-bridge.sh and rdma-tcp.sh).
         */
        static int defaultLanes() {
            return Math.max(1, Math.min(4, Runtime.getRuntime().availableProcessors() / 2));
        }

        private static String defaultOwner() {
            String host;
            try {
                host = InetAddress.getLocalHost().getHostName();
            } catch (IOException e) {
                host = "localhost";
            }
            return "bridge@" + host + ":" + ProcessHandle.current().pid() + ":"
                    + UUID.randomUUID().toString().substring(0, 8);
        }
    }
}
