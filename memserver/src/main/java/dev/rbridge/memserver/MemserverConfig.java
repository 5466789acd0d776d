package dev.rbridge.memserver;

import dev.rbridge.memory.AnonymousMemory;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ConnectionLimits;

import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.util.Objects;

/**
 * The memserver's settings, validated once. A null token admits every client (logged loudly at start).
 * {@code tcpCongestion}: see {@link ConnectParams#tcpCongestion(String)}. {@code connections}: how many connections
 * the listener holds ({@link ConnectionLimits}). {@code maxRegions}: how many regions it grants at once.
 * {@code tlsCertificates}: a directory with server-cert.pem and server-key.pem (and ca-cert.pem with {@code
 * tlsVerifyPeer}, which makes every client present a certificate from that CA), or null for a wire in clear.
 * {@code numaNode}: the NUMA node region memory prefers ({@link NumaPlacement}), or
 * {@link AnonymousMemory#ANY_NODE}.
 */
public record MemserverConfig(InetSocketAddress listen, long capacityBytes, String token, String transport,
        boolean hugePages, boolean mlock, String tcpCongestion, ConnectionLimits connections,
        int maxRegions, Path tlsCertificates, boolean tlsVerifyPeer,
        int numaNode) {
    public static final int DEFAULT_PORT = 7471;
    /**
     * Each region is one memory mapping, and the kernel allows a process 65530 by default (vm.max_map_count), the
     * JVM's own included; and a LIST of every region must fit in one message ({@link #MAX_REGIONS_LIMIT}).
     */
    public static final int MAX_REGIONS_DEFAULT = 32768;
    /**
     * The most regions a LIST reply can carry: 16 MiB over the largest entry (a 255-byte volume name and a client name
     * cut to {@link Memserver#MAX_CLIENT_NAME} bytes).
     */
    public static final int MAX_REGIONS_LIMIT = 38000;
    /** Capacity is counted in whole pages: beyond this, page rounding of a size could overflow. */
    public static final long MAX_CAPACITY = 1L << 62;

    /** Plain pages, not locked. */
    public MemserverConfig(InetSocketAddress listen, long capacityBytes, String token, String transport) {
        this(listen, capacityBytes, token, transport, false, false);
    }

    /** The default TCP congestion control. */
    public MemserverConfig(InetSocketAddress listen, long capacityBytes, String token, String transport,
            boolean hugePages, boolean mlock) {
        this(listen, capacityBytes, token, transport, hugePages, mlock, ConnectParams.TCP_CONGESTION_DEFAULT);
    }

    /** The default limits. */
    public MemserverConfig(InetSocketAddress listen, long capacityBytes, String token, String transport,
            boolean hugePages, boolean mlock, String tcpCongestion) {
        this(listen, capacityBytes, token, transport, hugePages, mlock, tcpCongestion, ConnectionLimits.DEFAULTS,
                MAX_REGIONS_DEFAULT);
    }

    /** In clear. */
    public MemserverConfig(InetSocketAddress listen, long capacityBytes, String token, String transport,
            boolean hugePages, boolean mlock, String tcpCongestion, ConnectionLimits connections,
            int maxRegions) {
        this(listen, capacityBytes, token, transport, hugePages, mlock, tcpCongestion, connections, maxRegions, null,
                false, AnonymousMemory.ANY_NODE);
    }

    /** This config with TLS from {@code certificates} (null: in clear). */
    public MemserverConfig withTls(Path certificates, boolean verifyPeer) {
        return new MemserverConfig(listen, capacityBytes, token, transport, hugePages, mlock, tcpCongestion,
                connections, maxRegions, certificates, verifyPeer, numaNode);
    }

    /** This config with region memory preferring NUMA node {@code node} ({@link AnonymousMemory#ANY_NODE}: none). */
    public MemserverConfig withNumaNode(int node) {
        return new MemserverConfig(listen, capacityBytes, token, transport, hugePages, mlock, tcpCongestion,
                connections, maxRegions, tlsCertificates, tlsVerifyPeer, node);
    }

    public MemserverConfig {
        Objects.requireNonNull(listen, "listen");
        Objects.requireNonNull(transport, "transport");
        Objects.requireNonNull(connections, "connections");
        if (capacityBytes <= 0 || capacityBytes > MAX_CAPACITY) {
            throw new IllegalArgumentException("capacity must be from 1 byte to 4 EiB: " + capacityBytes);
        }
        ConnectParams.checkCongestion(tcpCongestion);
        if (token != null && token.isBlank()) {
            throw new IllegalArgumentException("the token is empty");
        }
        if (tlsVerifyPeer && tlsCertificates == null) {
            throw new IllegalArgumentException("--tls-verify-peer needs --tls-certificates");
        }
        if (numaNode < AnonymousMemory.ANY_NODE || numaNode >= NumaPlacement.MAX_NODES) {
            throw new IllegalArgumentException("no NUMA node " + numaNode);
        }
        if (maxRegions < 1 || maxRegions > MAX_REGIONS_LIMIT) {
            throw new IllegalArgumentException("--max-regions must be from 1 to " + MAX_REGIONS_LIMIT
                    + " (a list of every region must fit in one message): " + maxRegions);
        }
    }

    /** Every field but the token's value: a record's own toString would print it, and configs end up in logs. */
    @Override
    public String toString() {
        return "MemserverConfig[listen=" + listen + ", capacityBytes=" + capacityBytes + ", token="
                + (token == null ? "none" : "(withheld)") + ", transport=" + transport + ", hugePages=" + hugePages
                + ", mlock=" + mlock + ", tcpCongestion=" + tcpCongestion + ", connections=" + connections
                + ", maxRegions=" + maxRegions + ", tls=" + (tlsCertificates == null ? "off"
                        : tlsCertificates
                                + (tlsVerifyPeer ? " (client certificates verified)" : ""))
                + ", numaNode="
                + (numaNode == AnonymousMemory.ANY_NODE ? "any" : numaNode) + "]";
    }
}
