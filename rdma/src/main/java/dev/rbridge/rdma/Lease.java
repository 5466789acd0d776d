package dev.rbridge.rdma;

import java.time.Duration;

/**
 * An ownership lease on a volume as granted by one memserver: valid for {@code ttlMillis} from the grant unless
 * renewed. {@code tookOver} is true when the grant ended a lease that another connection held and did not give back (it
 * expired, or that connection ended): writes the previous holder had in flight may have reached some replicas only. A
 * renewal from the holder's own connection, or a grant after the lease was given back with {@code unlease}, is no
 * takeover.
 *
 * <p>{@code epoch} numbers the grants of the volume on that memserver instance: a renewal by its holder's connection (of
 * a live lease, or of a lapsed one no other connection touched) keeps it, every other grant (another connection, or the
 * same one after another touched the volume in its lapse, or after giving it back) gets a higher one, rotates the keys of the volume's regions (every key belongs to one epoch) and is answered only
 * after every access under an older epoch has ended (the drained takeover). A holder that sees its epoch change on a
 * renewal lost its keys: its lease had lapsed. {@link #NO_EPOCH} from memservers that predate epochs.
 *
 * <p>{@code leaseId} is the secret of the grant: sent only to the grantee, presented again to continue the lease (on
 * this or a new connection) and to give it back. {@code continued} says whether the grant continued the lease whose id
 * the request presented with nobody else holding the volume, nor opening its regions, in between ({@code TRUE}); a
 * bridge that finds {@code FALSE} knows that someone else had the volume since its own last grant there. Null from
 * memservers that predate it; {@link #ownerChanges} is then all a bridge has (a count of grants to another owner
 * string: owner strings are labels, printable by anyone, so the count can be fooled).
 */
public record Lease(String volume, String owner, long ttlMillis, boolean tookOver, long ownerChanges, long epoch,
        long leaseId, Boolean continued) {
    /** The owner-change count of a memserver that does not keep one. */
    public static final long UNKNOWN_OWNER_CHANGES = -1;
    /** The epoch of a memserver that does not number its grants. */
    public static final long NO_EPOCH = 0;
    /** No lease id: a first request, or a memserver that hands none out. */
    public static final long NO_ID = 0;

    /** A grant that says nothing of the owners before it. */
    public Lease(String volume, String owner, long ttlMillis, boolean tookOver) {
        this(volume, owner, ttlMillis, tookOver, UNKNOWN_OWNER_CHANGES);
    }

    /** A grant from a memserver that predates epochs and lease ids. */
    public Lease(String volume, String owner, long ttlMillis, boolean tookOver, long ownerChanges) {
        this(volume, owner, ttlMillis, tookOver, ownerChanges, NO_EPOCH, NO_ID, null);
    }

    /** Whether the memserver numbers its grants (and so drains a takeover and hands out lease ids). */
    public boolean hasEpoch() {
        return epoch != NO_EPOCH;
    }

    /** The lease id is a secret: never printed. */
    @Override
    public String toString() {
        return "Lease[volume=" + volume + ", owner=" + owner + ", ttlMillis=" + ttlMillis + ", tookOver=" + tookOver
                + ", ownerChanges=" + ownerChanges + ", epoch=" + epoch + ", continued=" + continued + "]";
    }

    /**
     * The longest ttl a memserver grants; longer requests are refused ({@code BAD_REQUEST}). A lease is how long a
     * holder that stopped renewing (paused, cut off) keeps its volume from everyone else, so it must stay short.
     */
    public static final Duration MAX_TTL = Duration.ofMinutes(5);
}
