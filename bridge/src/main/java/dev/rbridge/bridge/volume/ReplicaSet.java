package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.MemserverLink;

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
    /**
     * In a lost state: the replicas that held every acknowledged write when the last one died, so a memserver that
     * comes back with exactly such a region, tagged from {@code lostMinGeneration} up to {@code generation}, can be
     * believed again.
     */
    final List<Replica> lostAtThisGeneration;
    final long lostMinGeneration;
    /** The newest state known to be tagged on all its replicas before this one (see {@link #confirmedLive()}). */
    private final long confirmedGenerationBefore;
    private final List<Replica> confirmedLiveBefore;
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
        this(previous, generation, live, building, gate, tagged, lostAtThisGeneration, generation);
    }

    ReplicaSet(ReplicaSet previous, long generation, List<Replica> live, Replica building, RebuildGate gate,
            CompletableFuture<Void> tagged, List<Replica> lostAtThisGeneration, long lostMinGeneration) {
        this.previous = previous;
        this.lostMinGeneration = lostMinGeneration;
        if (previous != null) {
            this.confirmedGenerationBefore = previous.confirmedGeneration();
            this.confirmedLiveBefore = previous.confirmedLive();
        } else {
            // A fresh state (placement, reattach, adoption): its replicas carry this generation, or the one before
            // it while the re-tagging that introduced it is still under way.
            this.confirmedGenerationBefore = tagged.isDone() ? generation : generation - 1;
            this.confirmedLiveBefore = List.copyOf(live);
        }
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

    /** What a memserver avoided for reads counts as, in operations in flight: more than any real queue. */
    private static final long AVOIDED_LOAD = 1L << 40;

    /** How busy {@code l} counts for a read now: its operations in flight, more while it is avoided. */
    static long readLoad(MemserverLink l) {
        long until = l.readsAvoidedUntil; // 0 unless a hedge ever beat it: then no clock is read
        return l.inFlight.get() + (until != 0 && until - System.nanoTime() > 0 ? AVOIDED_LOAD : 0);
    }

    /** The replica a read goes to: the least busy, spreading reads among equals (a racy cursor only balances). */
    Replica forRead() {
        int n = live.size();
        if (n == 1) {
            return live.getFirst();
        }
        // The least busy memserver, taking turns among equals: a memserver that stalls keeps its reads in flight and
        // so gets no more until it answers them (late binding). One whose read a hedge beat lately comes after every
        // other (ReadHedger): it stalls in bursts, and its next read would likely wait for the next one.
        int from = Math.floorMod(readCursor++, n);
        Replica best = null;
        long least = Long.MAX_VALUE;
        for (int k = 0; k < n; k++) {
            Replica r = live.get((from + k) % n);
            long load = readLoad(r.link());
            if (load < least) {
                best = r;
                least = load;
            }
        }
        return best;
    }

    private boolean taggedOk() {
        return tagged.isDone() && !tagged.isCompletedExceptionally();
    }

    /** The generation every replica of {@link #confirmedLive()} is known to carry. */
    long confirmedGeneration() {
        return taggedOk() ? generation : confirmedGenerationBefore;
    }

    /**
     * The replicas of the newest state whose tagging completed. Writes are acknowledged only in confirmed states, so
     * these hold every acknowledged write even if they failed since (their failure was never made durable).
     */
    List<Replica> confirmedLive() {
        return taggedOk() ? live : confirmedLiveBefore;
    }

    boolean lost() {
        return live.isEmpty();
    }

    boolean contains(Replica r) {
        return live.contains(r) || r.equals(building);
    }
}
