package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.MemserverLink;

import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;

/** What slabs need from the bridge around them: placement of new replicas, the rebuild queue and clean-up. */
public interface SlabHost {
    /**
     * Allocates up to {@code count} regions for {@code slab} on distinct memservers outside {@code exclude}, tagged with
     * {@code generation}; completes with at least one replica, or fails with the reason none could be placed.
     */
    CompletableFuture<List<Replica>> place(Slab slab, int count, long generation, Set<MemserverLink> exclude);

    /** The slab has fewer live replicas than its volume wants. */
    void rebuildWanted(Slab slab);

    /** Gives a region back, best effort (it may be on a memserver that is gone). */
    void release(Replica replica);

    /** How long one remote operation may take before its memserver is declared dead. */
    Duration operationTimeout();

    /**
     * A memserver refused {@code replica}'s key or the volume's regions as another client's ({@code ACCESS_DENIED}):
     * someone else took the volume's lease there. The host fences the volume ({@link Volume#fence}).
     */
    void leaseLost(Volume volume, Replica replica, String reason);

    /**
     * Remote operations done for clients so far, over every memserver (a count that grows while clients do I/O): the
     * rebuild holds to its rate only while it grows.
     */
    default long clientOperations() {
        return 0;
    }

    /** What hedges small reads of replicated slabs, or null when reads are not hedged. */
    default ReadHedger hedger() {
        return null;
    }

    /**
     * True when large reads should be spliced: the memservers are reached over plain tcp, where a READ's data can
     * move from their socket to the client's without a copy here.
     */
    default boolean splicesReads() {
        return false;
    }
}
