package dev.rbridge.rdma;

import java.time.Duration;

/**
 * An ownership lease on a volume as granted by one memserver: valid for {@code ttlMillis} from the grant unless
 * renewed. {@code tookOver} is true when the grant ended a lease that another connection held and did not give back (it
 * expired, or that connection ended): the volume's keys were rotated, so reopen its regions for the new keys, and
 * writes the previous holder had in flight may have reached some replicas only. A renewal from the holder's own
 * connection, or a grant after the lease was given back with {@code unlease}, is no takeover.
 */
public record Lease(String volume, String owner, long ttlMillis, boolean tookOver) {
    /**
     * The longest ttl a memserver grants; longer requests are refused ({@code BAD_REQUEST}). A lease is how long a
     * holder that stopped renewing (paused, cut off) keeps its volume from everyone else, so it must stay short.
     */
    public static final Duration MAX_TTL = Duration.ofMinutes(5);
}
