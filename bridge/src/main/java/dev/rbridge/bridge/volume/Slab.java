package dev.rbridge.bridge.volume;

import dev.rbridge.common.Failures;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A fixed-size piece of a volume and its replicas. The data path reads {@link #set} without locking; every change of
 * state (allocation, a failed replica, a rebuild starting, ending or failing, a reattach) happens under the slab's
 * monitor and publishes a new {@link ReplicaSet}.
 */
public final class Slab {
    private static final Logger log = LoggerFactory.getLogger(Slab.class);

    final Volume volume;
    final int index;
    final long start;
    final long length;
    volatile ReplicaSet set;
    private CompletableFuture<ReplicaSet> allocating;
    /** True while the slab waits in (or is taken by) the rebuild queue, so it is queued once. */
    final AtomicBoolean rebuildQueued = new AtomicBoolean();
    /** Set when the replicas may differ (unclean exit of the previous bridge) until the rebuilder made them equal. */
    final AtomicBoolean resyncWanted = new AtomicBoolean();
    /** Replicas the running resync has already overwritten (rebuild thread only). */
    final Set<Replica> resynced = new HashSet<>();
    /** Blocks known to be zero (null until the slab is first zeroed). */
    volatile ZeroMap zeros;
    /** Data writes issued and in flight: a zeroing only vouches for blocks no write raced with. */
    final AtomicLong dataWritesIssued = new AtomicLong();
    final AtomicInteger dataWritesInFlight = new AtomicInteger();
    /** Overlapping writes reach every replica in one order ({@link WriteOrder}). */
    final WriteOrder writeOrder = new WriteOrder();
    /** Bytes copied by the running rebuild, for progress reports. */
    final AtomicLong rebuildCopied = new AtomicLong();

    Slab(Volume volume, int index, long start, long length) {
        this.volume = volume;
        this.index = index;
        this.start = start;
        this.length = length;
    }

    public Volume volume() {
        return volume;
    }

    public int index() {
        return index;
    }

    public long length() {
        return length;
    }

    RegionTag tag(int replicaSlot, long generation) {
        return new RegionTag(volume.name(), index, replicaSlot, generation);
    }

    ZeroMap zeroMap() {
        ZeroMap z = zeros;
        if (z == null) {
            synchronized (this) {
                z = zeros;
                if (z == null) {
                    z = new ZeroMap(length);
                    zeros = z;
                }
            }
        }
        return z;
    }

    /** The replica set, allocating the slab on first use (a write). */
    synchronized CompletableFuture<ReplicaSet> allocate() {
        if (set != null) {
            return CompletableFuture.completedFuture(set);
        }
        if (allocating == null) {
            int want = volume.replicas();
            // Placed as generation 0 and tagged 1 only once placement succeeded: a grant that answers after the
            // bridge gave up on it (a frozen memserver) is then an orphan that nobody can mistake for a replica.
            CompletableFuture<ReplicaSet> f = volume.host.place(this, want, ReplicaSet.BUILDING, Set.of())
                    .thenCompose(rs -> volume.manifest.record(index).handle((v, e) -> {
                        if (e != null) {
                            rs.forEach(volume.host::release);
                            throw new CompletionException(e);
                        }
                        return rs;
                    }))
                    .thenCompose(this::tagFirstGeneration).thenApply(rs -> {
                        synchronized (this) {
                            if (set == null) {
                                set = ReplicaSet.initial(rs);
                                log.debug("volume {} slab {}: placed on {}", volume.name(), index, describe(rs));
                                if (rs.size() < want) {
                                    log.warn(
                                            "volume {} slab {}: only {} of {} replicas could be placed ({}); it starts degraded",
                                            volume.name(), index, rs.size(), want, describe(rs));
                                    volume.host.rebuildWanted(this);
                                }
                            } else {
                                rs.forEach(volume.host::release); // someone adopted it meanwhile (cannot happen today)
                            }
                            return set;
                        }
                    });
            allocating = f;
            f.whenComplete((s, e) -> {
                synchronized (this) {
                    allocating = null;
                }
            });
            return f;
        }
        return allocating;
    }

    /** Tags freshly placed regions with generation 1; keeps the ones that took it (at least one, or fails). */
    private CompletableFuture<List<Replica>> tagFirstGeneration(List<Replica> placed) {
        List<CompletableFuture<RegionDescriptor>> fs = new ArrayList<>();
        for (Replica r : placed) {
            fs.add(r.connection().retag(r.region(), tag(r.region().tag().replica(), 1)));
        }
        return CompletableFuture.allOf(fs.toArray(CompletableFuture[]::new)).handle((v, e) -> {
            List<Replica> ok = new ArrayList<>();
            Throwable first = null;
            for (int i = 0; i < placed.size(); i++) {
                if (fs.get(i).isCompletedExceptionally()) {
                    first = first == null ? fs.get(i).exceptionNow() : first;
                    if (ReplicaOps.leaseLost(fs.get(i).exceptionNow())) {
                        volume.host.leaseLost(volume, placed.get(i), Failures.reason(fs.get(i).exceptionNow()));
                    }
                    volume.host.release(placed.get(i));
                } else {
                    ok.add(placed.get(i));
                }
            }
            if (ok.isEmpty()) {
                throw new CompletionException(first);
            }
            return ok;
        });
    }

    /**
     * Reattach at start: adopts the regions of the newest generation found for this slab on the reachable memservers
     * (at most one per memserver, at most the volume's replica count) and returns the rest, which are stale or
     * half-built and must be released. When fewer replicas than wanted are found, the survivors are tagged with a new
     * generation before any write is acknowledged (so a missing one that shows up later can never be believed) and
     * a rebuild is queued.
     */
    synchronized List<Replica> reattach(List<Replica> found) {
        long newest = 0;
        for (Replica r : found) {
            newest = Math.max(newest, r.region().tag().generation());
        }
        List<Replica> live = new ArrayList<>();
        List<Replica> stale = new ArrayList<>();
        Set<Object> links = new HashSet<>();
        for (Replica r : found) {
            if (newest >= 1 && r.region().tag().generation() == newest && live.size() < volume.replicas()
                    && links.add(r.link())) {
                live.add(r);
            } else {
                stale.add(r);
            }
        }
        if (live.isEmpty()) {
            return stale;
        }
        if (live.size() >= volume.replicas()) {
            set = new ReplicaSet(null, newest, live, null, null, CompletableFuture.completedFuture(null), List.of());
        } else {
            long generation = newest + 1;
            CompletableFuture<Void> tagged = new CompletableFuture<>();
            set = new ReplicaSet(null, generation, live, null, null, tagged, List.of());
            log.warn("volume {} slab {}: found {} of {} replicas ({}); serving degraded at generation {}",
                    volume.name(),
                    index, live.size(), volume.replicas(), describe(live), generation);
            retag(live, generation, tagged);
            volume.host.rebuildWanted(this);
        }
        return stale;
    }

    /**
     * Reattach found no region for a slab the manifest says was allocated: every replica was lost while no bridge was
     * watching. It fails with EIO rather than reading as zeroes.
     */
    synchronized void lostEverything() {
        log.error("volume {} slab {} (bytes {}-{}) held data but none of its replicas was found; requests on it fail "
                + "with EIO", volume.name(), index, start, start + length - 1);
        set = new ReplicaSet(null, 0, List.of(), null, null,
                CompletableFuture.failedFuture(volume.lostError(this)), List.of());
    }

    /** Fails replicas whose connection has closed (one that died before the replica was published). */
    void failClosed() {
        ReplicaSet cur = set;
        if (cur == null) {
            return;
        }
        for (Replica r : cur.live) {
            if (!r.connection().isOpen()) {
                fail(r, "its connection to " + r.link().label() + " is closed");
            }
        }
        if (cur.building != null && !cur.building.connection().isOpen()) {
            fail(cur.building, "its connection to " + cur.building.link().label() + " is closed");
        }
    }

    /** The replica of this slab on {@code connection}, if it has one (live or building). */
    Replica replicaOn(RemoteConnection connection) {
        ReplicaSet cur = set;
        if (cur == null) {
            return null;
        }
        for (Replica r : cur.live) {
            if (r.connection() == connection) {
                return r;
            }
        }
        return cur.building != null && cur.building.connection() == connection ? cur.building : null;
    }

    /**
     * Takes a healthy replica out because its memserver is being emptied, once the others are enough: as a failure
     * (a newer generation on the rest, its region released), logged as what it is.
     */
    CompletableFuture<Void> retire(Replica r, String reason) {
        synchronized (this) { // decided on the state now, not the rebuild duty's snapshot
            ReplicaSet cur = set;
            if (cur == null || cur.lost() || !cur.live.contains(r) || cur.confirmedGeneration() != cur.generation
                    || cur.live.stream().filter(x -> x != r && !x.link().draining()).count() < volume.replicas()) {
                return CompletableFuture.completedFuture(null); // not now: the drain offers it again
            }
            return fail(r, reason);
        }
    }

    /**
     * Takes a replica out after it failed an operation. Completes normally once every remaining live replica is tagged
     * with a newer generation (so the failed one can never be believed again), exceptionally if none remains.
     */
    CompletableFuture<Void> fail(Replica r, String reason) {
        List<Replica> toRelease = new ArrayList<>();
        CompletableFuture<Void> result;
        synchronized (this) {
            ReplicaSet cur = set;
            if (cur == null) {
                return CompletableFuture.completedFuture(null);
            }
            if (r.equals(cur.building)) {
                result = copyTargetFailed(cur, r, reason, toRelease);
            } else if (!cur.live.contains(r)) {
                return cur.tagged; // already out; the latest state decides
            } else {
                List<Replica> survivors = new ArrayList<>(cur.live);
                survivors.remove(r);
                result = survivors.isEmpty() ? lastReplicaFailed(cur, r, reason, toRelease)
                        : liveReplicaFailed(cur, r, reason, survivors, toRelease);
            }
            volume.host.rebuildWanted(this);
        }
        toRelease.forEach(volume.host::release);
        return result;
    }

    /** {@link #fail}: the copy target {@code r} failed; the copy is retried. Holding this slab's lock. */
    private CompletableFuture<Void> copyTargetFailed(ReplicaSet cur, Replica r, String reason,
            List<Replica> toRelease) {
        log.warn("volume {} slab {}: copy target {} failed ({}); the copy will be retried",
                volume.name(), index, r.describe(), reason);
        cur.gate.open();
        toRelease.add(r);
        if (cur.lost()) {
            set = new ReplicaSet(cur, cur.generation, cur.live, null, null, cur.tagged,
                    cur.lostAtThisGeneration, cur.lostMinGeneration);
            return cur.tagged;
        }
        // The target may already carry the current generation (a resync target, or a rebuilt copy
        // tagged just before it would have joined): writes from now on must not be acknowledged at a
        // generation it could be believed at.
        long generation = cur.generation + 1;
        CompletableFuture<Void> tagged = new CompletableFuture<>();
        set = new ReplicaSet(cur, generation, cur.live, null, null, tagged, List.of());
        retag(cur.live, generation, tagged);
        return tagged;
    }

    /** {@link #fail}: the live replica {@code r} failed and {@code survivors} serve on. Holding this slab's lock. */
    private CompletableFuture<Void> liveReplicaFailed(ReplicaSet cur, Replica r, String reason,
            List<Replica> survivors, List<Replica> toRelease) {
        long generation = cur.generation + 1;
        log.warn("volume {} slab {}: replica {} failed ({}); serving from {} at generation {}",
                volume.name(), index, r.describe(), reason, describe(survivors), generation);
        CompletableFuture<Void> tagged = new CompletableFuture<>();
        set = new ReplicaSet(cur, generation, survivors, cur.building, cur.gate, tagged, List.of());
        retag(survivors, generation, tagged);
        toRelease.add(r); // the survivors have everything; free its memory if its memserver still answers
        return tagged;
    }

    /** {@link #fail}: {@code r} was the last live replica; the slab is lost. Holding this slab's lock. */
    private CompletableFuture<Void> lastReplicaFailed(ReplicaSet cur, Replica r, String reason,
            List<Replica> toRelease) {
        if (cur.building != null) {
            cur.gate.open();
            toRelease.add(cur.building);
        }
        // Every replica of the last confirmed state holds every acknowledged write: any of them that
        // comes back may serve again (a bridge-side outage can cut all connections at once).
        List<Replica> lost = new ArrayList<>(cur.lostAtThisGeneration);
        for (Replica c : cur.confirmedLive()) {
            if (!lost.contains(c)) {
                lost.add(c);
            }
        }
        if (!lost.contains(r)) {
            lost.add(r);
        }
        long minGeneration = Math.min(cur.confirmedGeneration(),
                cur.lostAtThisGeneration.isEmpty() ? Long.MAX_VALUE : cur.lostMinGeneration);
        log.error("volume {} slab {} (bytes {}-{}) lost its last replica {}: {}; requests on it fail with EIO"
                + " until one of {} comes back", volume.name(), index, start, start + length - 1,
                r.describe(), reason, describe(lost));
        set = new ReplicaSet(cur, cur.generation, List.of(), null, null,
                CompletableFuture.failedFuture(volume.lostError(this)), lost, minGeneration);
        return set.tagged;
    }

    private void retag(List<Replica> survivors, long generation, CompletableFuture<Void> tagged) {
        List<CompletableFuture<?>> fs = new ArrayList<>();
        for (Replica s : survivors) {
            fs.add(s.connection().retag(s.region(), tag(s.region().tag().replica(), generation)));
        }
        CompletableFuture.allOf(fs.toArray(CompletableFuture[]::new)).whenComplete((v, e) -> {
            if (e == null) {
                tagged.complete(null);
                return;
            }
            CompletableFuture<Void> next = null;
            for (int i = 0; i < survivors.size(); i++) {
                if (fs.get(i).isCompletedExceptionally() && ReplicaOps.leaseLost(fs.get(i).exceptionNow())) {
                    volume.host.leaseLost(volume, survivors.get(i), Failures.reason(fs.get(i).exceptionNow()));
                }
                if (fs.get(i).isCompletedExceptionally()) {
                    next = fail(survivors.get(i), "could not record generation " + generation + ": "
                            + Failures.reason(fs.get(i).exceptionNow()));
                }
            }
            if (next == null || next == tagged) {
                tagged.completeExceptionally(volume.lostError(this));
                return;
            }
            next.whenComplete((v2, e2) -> {
                if (e2 == null) {
                    tagged.complete(null);
                } else {
                    tagged.completeExceptionally(e2);
                }
            });
        });
    }

    /** Rebuild: adds {@code target} as the building replica; returns the state it replaced, or null if not wanted now. */
    synchronized ReplicaSet startRebuild(Replica target, RebuildGate gate) {
        ReplicaSet cur = set;
        // Replicas on a draining memserver do not count: the copy that replaces one is built beside it.
        if (cur == null || cur.lost() || cur.building != null
                || cur.live.stream().filter(r -> !r.link().draining()).count() >= volume.replicas()
                || cur.confirmedGeneration() != cur.generation) {
            return null;
        }
        rebuildCopied.set(0);
        set = new ReplicaSet(cur, cur.generation, cur.live, target, gate, cur.tagged, cur.lostAtThisGeneration);
        return cur;
    }

    /** Resync: takes {@code r} out of reading and makes it the building replica, to be overwritten from the others. */
    synchronized ReplicaSet startResync(Replica r, RebuildGate gate) {
        ReplicaSet cur = set;
        if (cur == null || cur.building != null || cur.live.size() < 2 || !cur.live.contains(r)
                || cur.confirmedGeneration() != cur.generation) {
            return null;
        }
        List<Replica> live = new ArrayList<>(cur.live);
        live.remove(r);
        rebuildCopied.set(0);
        set = new ReplicaSet(cur, cur.generation, live, r, gate, cur.tagged, cur.lostAtThisGeneration);
        return cur;
    }

    enum Promotion {
        DONE, GENERATION_MOVED, ABORTED
    }

    /** Rebuild: the copy is complete and tagged {@code generation}; it joins the live replicas if that is current. */
    synchronized Promotion promote(Replica target, long generation) {
        ReplicaSet cur = set;
        if (!target.equals(cur.building)) {
            return Promotion.ABORTED;
        }
        if (cur.generation != generation) {
            return Promotion.GENERATION_MOVED;
        }
        List<Replica> live = new ArrayList<>(cur.live);
        live.add(target);
        set = new ReplicaSet(cur, generation, live, null, null, cur.tagged, List.of());
        log.info("volume {} slab {}: rebuilt onto {}; {} of {} replicas at generation {}", volume.name(), index,
                target.describe(), live.size(), volume.replicas(), generation);
        return Promotion.DONE;
    }

    /** Rebuild gave up (its source or target failed, or it timed out). */
    void abortRebuild(Replica target, String reason) {
        fail(target, reason);
    }

    /**
     * A memserver came back holding a region this slab lost with its last replica (one that held every acknowledged
     * write when the slab was lost, at a generation of that time): nothing can have been written since, so it is
     * believed again, at a new generation.
     */
    synchronized boolean adoptLost(Replica candidate, long generation) {
        ReplicaSet cur = set;
        if (cur == null || !cur.lost() || generation < cur.lostMinGeneration || generation > cur.generation) {
            return false;
        }
        for (Replica l : cur.lostAtThisGeneration) {
            if (l.sameRegionAs(candidate)) {
                // A new generation, so the other lost replicas (which will not see the writes from now on) can never
                // be believed over this one.
                long next = cur.generation + 1;
                CompletableFuture<Void> tagged = new CompletableFuture<>();
                set = new ReplicaSet(null, next, List.of(candidate), null, null, tagged, List.of());
                log.info("volume {} slab {}: {} came back holding every acknowledged write; serving again at generation"
                        + " {}", volume.name(), index, candidate.describe(), next);
                retag(List.of(candidate), next, tagged);
                volume.host.rebuildWanted(this);
                return true;
            }
        }
        return false;
    }

    static String describe(List<Replica> rs) {
        StringBuilder b = new StringBuilder();
        for (Replica r : rs) {
            b.append(b.isEmpty() ? "" : ", ").append(r.describe());
        }
        return b.isEmpty() ? "none" : b.toString();
    }
}
