package dev.rbridge.bridge.volume;

import java.util.Locale;

/** Where a slab's copies stand, as an operator sees it ({@link Volume#slabStatus}). */
public enum SlabState {
    /** Never written: no replicas, reads as zeroes. */
    UNALLOCATED,
    /** Every wanted replica is live. */
    HEALTHY,
    /** Fewer live replicas than wanted, and no copy under way. */
    DEGRADED,
    /** A new or resynchronized replica is being copied. */
    REBUILDING,
    /** No live replica: requests on the slab fail with EIO. */
    LOST;

    /** The lowercase form admin JSON, metrics labels and logs show. */
    public String label() {
        return name().toLowerCase(Locale.ROOT);
    }
}
