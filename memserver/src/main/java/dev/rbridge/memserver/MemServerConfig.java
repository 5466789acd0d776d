package dev.rbridge.memserver;

import java.net.InetSocketAddress;
import java.util.Objects;

/** The memserver's settings, validated once. A null token admits every client (logged loudly at start). */
public record MemServerConfig(InetSocketAddress listen, long capacityBytes, String token, String transport,
                              boolean hugePages, boolean mlock) {
    public static final int DEFAULT_PORT = 7471;

    /** Plain pages, not locked. */
    public MemServerConfig(InetSocketAddress listen, long capacityBytes, String token, String transport) {
        this(listen, capacityBytes, token, transport, false, false);
    }

    public MemServerConfig {
        Objects.requireNonNull(listen, "listen");
        Objects.requireNonNull(transport, "transport");
        if (capacityBytes <= 0) {
            throw new IllegalArgumentException("capacity must be positive: " + capacityBytes);
        }
        if (token != null && token.isBlank()) {
            throw new IllegalArgumentException("the token is empty");
        }
    }
}
