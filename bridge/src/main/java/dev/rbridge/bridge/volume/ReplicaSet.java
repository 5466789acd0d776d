package dev.rbridge.bridge.volume;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One immutable state of a slab's copies. {@code live} replicas hold every acknowledged write and are tagged with
 * {@code generation} once {@code tagged} completes; a {@code building} replica (tagged generation 0, so never trusted
 * after a restart) receives every write while a rebuild copies the rest into it. A write is acknowledged only after
 * {@code tagged}: until the survivors of a failure carry the new generation, a bridge restart could not tell them
 * from the replica that missed the write.
 */
final class ReplicaSet {
    /** Generation 0 marks a copy under construction; live generations start at 1. */
    static final long BUILDING = 0;

    final long generation;
    final List<Replica> live;
    final Replica building;
    final RebuildGate gate;
    final CompletableFuture<Void> tagged;
    /** Replicas lost with this generation, so a memserver that comes back with exactly that region can be believed. */
    final List<Replica> lostAtThisGeneration;
    /** Writes issued against this state and not yet complete: a rebuild waits for them before copying. */
    final AtomicInteger writesInFlight = new AtomicInteger();
    /**
     * The state this one replaced, while writes issued against it may still be in flight (a rebuild waits for the
     * whole chain, then cuts it).
     */
    volatile ReplicaSet previous;
    private int readCursor;

    ReplicaSet(ReplicaSet previous, long generation, List<Replica> live, Replica building, RebuildGate gate,
               CompletableFuture<Void> tagged, List<Replica> lostAtThisGeneration) {
        this.previous = previous;
        this.generation = generation;
        this.live = List.copyOf(live);
        this.building = building;
        this.gate = gate;
        this.tagged = tagged;
        this.lostAtThisGeneration = List.copyOf(lostAtThisGeneration);
    }

    static ReplicaSet initial(List<Replica> live) {
        return new ReplicaSet(null, 1, live, null, null, CompletableFuture.completedFuture(null), List.of());
    }

    /** Spreads reads over the live replicas; a racy cursor is fine, it only balances load. */
    Replica forRead() {
        int n = live.size();
        if (n == 1) {
            return live.getFirst();
        }
        int i = readCursor++;
        return live.get(Math.floorMod(i, n));
    }

    boolean lost() {
        return live.isEmpty();
    }

    boolean contains(Replica r) {
        return live.contains(r) || r.equals(building);
    }
}
