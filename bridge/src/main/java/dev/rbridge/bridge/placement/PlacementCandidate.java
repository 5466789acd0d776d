package dev.rbridge.bridge.placement;

/**
 * A memserver as {@link PlacementPolicy} sees it: whether it can take a new region and how much room it has. The
 * bridge's {@code MemserverLink} is one; the simulator (module {@code sim}) has its own. Identity is the object's.
 */
public interface PlacementCandidate {
    /** Bytes it can still lend, less what was placed on it and not yet reported. */
    long freeBytes();

    /** Whether it is reachable now (a live connection). */
    boolean up();

    /** Being emptied: never chosen for new regions. */
    boolean draining();

    /**
     * The failure domain it shares with others (a rack, a power feed), or null while unknown. Real memservers carry
     * no label yet, so for the bridge this is always null and placement ignores domains.
     */
    default String failureDomain() {
        return null;
    }
}
