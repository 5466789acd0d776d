package dev.rbridge.bridge.volume;

import java.util.Locale;

/**
 * A volume as an operator sees it ({@link Volume#status}): its worst slab's state, unless it is {@link #FENCED}, which
 * overrides everything.
 */
public enum VolumeState {
    /** Every allocated slab is healthy. */
    HEALTHY,
    /** Some slab has fewer live replicas than wanted. */
    DEGRADED,
    /** Some slab is being copied onto a new replica. */
    REBUILDING,
    /** Some slab has no live replica. */
    LOST,
    /** This bridge lost the volume's lease: every request fails with EIO (see {@link Volume#fenced()}). */
    FENCED;

    /** The lowercase form admin JSON, metrics labels and logs show. */
    public String label() {
        return name().toLowerCase(Locale.ROOT);
    }
}
