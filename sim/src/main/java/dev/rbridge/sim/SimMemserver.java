package dev.rbridge.sim;

import dev.rbridge.bridge.placement.PlacementCandidate;

/** One simulated memserver: its room, whether it is up, its rack, the pieces it holds and the copies it serves. */
final class SimMemserver implements PlacementCandidate {
    final int index;
    private final long capacity;
    /** Its rack's label when placement knows racks, else null (as the bridge's memservers today). */
    private final String domain;
    long free;
    boolean up = true;
    /** Counts its failures: a copy that began before the last one finds its target gone. */
    int incarnation;
    /** Rebuild copies it sends or receives now; they share its link. */
    int streams;
    /** The pieces it holds, as indexes into {@link Cluster}'s piece table. */
    final IntList pieces = new IntList();

    SimMemserver(int index, long capacity, String domain) {
        this.index = index;
        this.capacity = capacity;
        this.free = capacity;
        this.domain = domain;
    }

    @Override
    public long freeBytes() {
        return free;
    }

    @Override
    public boolean up() {
        return up;
    }

    @Override
    public boolean draining() {
        return false;
    }

    @Override
    public String failureDomain() {
        return domain;
    }

    /** It fails: down, its contents gone, its copies cut. */
    void fail() {
        up = false;
        incarnation++;
        streams = 0;
        free = capacity;
        pieces.clear();
    }

    @Override
    public String toString() {
        return "memserver " + index;
    }
}
