package dev.rbridge.rdma;

import java.time.Duration;

/**
 * An ownership lease on a volume as granted by one memserver: valid for {@code ttlMillis} from the grant unless
 * renewed. {@code tookOver} is true when the grant ended a lease that another connection held and did not give back (it
 * expired, or that connection ended): the volume's keys were rotated, so reopen its regions for the new keys, and
 * writes the previous holder had in flight may have reached some replicas only. A renewal from the holder's own
 * connection, or a grant after the lease was given back with {@code unlease}, is no takeover.
 *
 * <p>{@code ownerChanges} counts the grants of the volume's lease on that memserver that went to another owner string
 * than the lease before (held, lapsed, ended or given back), since the memserver started: a holder that finds it moved
 * since its own last grant there knows that someone else had the volume meanwhile, and may have changed it (moved or
 * rebuilt slabs), even if it gave the lease back cleanly. A count and not a flag, so that a grant whose reply was lost
 * does not hide it. {@link #UNKNOWN_OWNER_CHANGES} from memservers that predate it.
 */
public record Lease(String volume, String owner, long ttlMillis, boolean tookOver, long ownerChanges) {
    /** The owner-change count of a memserver that does not keep one. */
    public static final long UNKNOWN_OWNER_CHANGES = -1;

    /** A grant that says nothing of the owners before it. */
    public Lease(String volume, String owner, long ttlMillis, boolean tookOver) {
        this(volume, owner, ttlMillis, tookOver, UNKNOWN_OWNER_CHANGES);
    }

    /**
     * The longest ttl a memserver grants; longer requests are refused ({@code BAD_REQUEST}). A lease is how long a
     * holder that stopped renewing (paused, cut off) keeps its volume from everyone else, so it must stay short.
     */
    public static final Duration MAX_TTL = Duration.ofMinutes(5);
}
