package dev.rbridge.memserver;

import dev.rbridge.rdma.ConnectParams;

import java.net.InetSocketAddress;
import java.util.Objects;

/**
 * The memserver's settings, validated once. A null token admits every client (logged loudly at start).
 * {@code tcpCongestion}: see {@link ConnectParams#tcpCongestion(String)}.
 */
public record MemServerConfig(InetSocketAddress listen, long capacityBytes, String token, String transport,
                              boolean hugePages, boolean mlock, String tcpCongestion) {
    public static final int DEFAULT_PORT = 7471;

    /** Plain pages, not locked. */
    public MemServerConfig(InetSocketAddress listen, long capacityBytes, String token, String transport) {
        this(listen, capacityBytes, token, transport, false, false);
    }

    /** The default TCP congestion control. */
    public MemServerConfig(InetSocketAddress listen, long capacityBytes, String token, String transport,
                           boolean hugePages, boolean mlock) {
        this(listen, capacityBytes, token, transport, hugePages, mlock, ConnectParams.TCP_CONGESTION_DEFAULT);
    }

    public MemServerConfig {
        Objects.requireNonNull(listen, "listen");
        Objects.requireNonNull(transport, "transport");
        if (capacityBytes <= 0) {
            throw new IllegalArgumentException("capacity must be positive: " + capacityBytes);
        }
        ConnectParams.checkCongestion(tcpCongestion);
        if (token != null && token.isBlank()) {
            throw new IllegalArgumentException("the token is empty");
        }
    }
}
