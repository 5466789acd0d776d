package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.memservers.RemoteOpMetrics;
import dev.rbridge.common.Failures;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * One small read of one slab that may be hedged ({@link ReadHedger}): the first attempt goes to the replica
 * {@link ReplicaSet#forRead} picks, a second one, if the hedger asks for it, to the least busy live replica not tried
 * yet. Each attempt reads into its own scratch buffer; the first to answer is copied into the caller's buffer and
 * completes the read, the other's answer is dropped. A failed attempt takes its replica out as any failed read does
 * (a refused lease fences the volume, whichever attempt it comes from) and lets the hedger try another replica; the read
 * fails over as an unhedged one would only when no attempt is left that could still answer.
 */
final class HedgedRead {
    private final Volume volume;
    private final ReadHedger hedger;
    private final Slab slab;
    private final long offset;
    private final MemorySegment dst;
    private final int attempt;
    private final long start;
    private final long deadline;
    private final CompletableFuture<Void> result = new CompletableFuture<>();
    /** Guarded by this: the replicas tried (the first first), attempts not yet answered, whether one is hedging. */
    private final List<Replica> tried = new ArrayList<>(2);
    private int inFlight;
    private boolean hedged;
    /** What the first attempt's memserver had completed when the read was sent. */
    private long progressAtSend;
    /** Set once, under this: the caller has its answer (data, an error, or a fail-over read under way). */
    private volatile boolean answered;

    private HedgedRead(Volume volume, ReadHedger hedger, Slab slab, long offset, MemorySegment dst, int attempt) {
        this.volume = volume;
        this.hedger = hedger;
        this.slab = slab;
        this.offset = offset;
        this.dst = dst;
        this.attempt = attempt;
        this.start = System.nanoTime();
        this.deadline = start + volume.readLatency.delayNanos();
    }

    /** Sends the read, watched by {@code hedger}; null when no scratch memory is left (read it unhedged). */
    static CompletableFuture<Void> send(Volume volume, ReadHedger hedger, Slab slab, ReplicaSet set, long offset,
            MemorySegment dst, int attempt) {
        MemorySegment buffer = hedger.scratch().take(dst.byteSize());
        if (buffer == null) {
            return null;
        }
        HedgedRead r = new HedgedRead(volume, hedger, slab, offset, dst, attempt);
        Replica first = set.forRead();
        synchronized (r) {
            r.tried.add(first);
            r.inFlight = 1;
            r.progressAtSend = first.link().completed.sum();
        }
        r.issue(first, buffer, false);
        if (!r.answered) {
            hedger.watch(r);
        }
        return r.result;
    }

    long deadline() {
        return deadline;
    }

    /** Whether the read still waits for an answer (the hedger drops it otherwise). */
    boolean waiting() {
        return !answered;
    }

    /**
     * The hedger's call once the deadline passed: sends another attempt (from a virtual thread: the hedger never
     * blocks in a socket write); false when there was none to send, or no reason to: the first attempt's memserver
     * completed other operations since the read was sent, so it is busy, not stalled, and a second attempt would only
     * add to the load that makes it late (a failed attempt clears this: then any replica not tried is worth it).
     */
    boolean hedge() {
        Replica next = null;
        MemorySegment buffer;
        synchronized (this) {
            if (answered || hedged || slab.resyncWanted.get()) {
                return false;
            }
            if (tried.size() == 1 && tried.getFirst().link().completed.sum() != progressAtSend) {
                return false;
            }
            ReplicaSet set = slab.set;
            if (set == null || set.lost()) {
                return false;
            }
            long least = Long.MAX_VALUE;
            for (Replica r : set.live) {
                long load = ReplicaSet.readLoad(r.link());
                if (!tried.contains(r) && load < least) {
                    next = r;
                    least = load;
                }
            }
            if (next == null || (buffer = hedger.scratch().take(dst.byteSize())) == null) {
                return false;
            }
            hedged = true;
            inFlight++;
            tried.add(next);
        }
        volume.readHedges.increment();
        Replica to = next;
        Thread.startVirtualThread(() -> issue(to, buffer, true));
        return true;
    }

    private void issue(Replica r, MemorySegment buffer, boolean isHedge) {
        long length = dst.byteSize();
        MemorySegment view = buffer.asSlice(0, length);
        CompletableFuture<Void> f;
        try {
            f = ReplicaOps.counted(r, RemoteOpMetrics.Op.READ, length,
                    x -> x.connection().read(x.region(), offset, view));
        } catch (RuntimeException | Error e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete((v, e) -> {
            try {
                arrived(r, isHedge, buffer, view, e);
            } catch (RuntimeException | Error x) {
                result.completeExceptionally(x); // whatever broke, the caller hears of it
            }
        });
    }

    private void arrived(Replica r, boolean isHedge, MemorySegment buffer, MemorySegment view, Throwable e) {
        long now = System.nanoTime();
        boolean won = false;
        boolean failOver = false;
        boolean tryAnother = false;
        Throwable cause = e == null ? null : Failures.cause(e);
        boolean leaseLost = cause != null && ReplicaOps.leaseLost(cause);
        synchronized (this) {
            inFlight--;
            if (e == null) {
                if (!answered) {
                    answered = true;
                    won = true;
                }
            } else {
                if (!answered) {
                    if (leaseLost || inFlight == 0) {
                        answered = true;
                        failOver = true;
                    } else if (hedged) {
                        hedged = false; // one attempt is still out: the hedger may try a replica not tried yet
                        tryAnother = true;
                    }
                }
            }
        }
        if (won) {
            MemorySegment.copy(view, 0, dst, 0, view.byteSize());
        }
        // Both providers are done with a buffer once its read completed or failed: it may serve the next read.
        hedger.scratch().give(buffer);
        if (won) {
            answeredFirst(isHedge, now);
        } else if (e != null) {
            failed(r, cause, leaseLost, failOver, tryAnother);
        } // else answered already: this answer is dropped
    }

    /** This attempt answered first (its data is in {@code dst}): the latency is sampled, the read completes. */
    private void answeredFirst(boolean isHedge, long now) {
        long delay = deadline - start;
        if (isHedge) {
            volume.readHedgesWon.increment();
            MemserverLink slow;
            synchronized (this) {
                slow = tried.getFirst().link();
            }
            slow.readsAvoidedUntil = (now + ReadHedger.AVOID_AFTER_HEDGE_WON_NANOS) | 1; // never 0: 0 is "none"
            volume.readLatency.sample(delay); // a stall: counted at the delay, so it keeps its rank only
        } else {
            volume.readLatency.sample(Math.min(now - start, 4 * delay));
        }
        result.complete(null);
    }

    /**
     * The attempt on {@code r} failed with {@code cause}: a lost lease fences the volume, a replica fault takes
     * {@code r} out; {@code tryAnother} lets the hedger try a replica not tried yet, {@code failOver} (no attempt
     * left out) reads again the usual way or fails the read.
     */
    private void failed(Replica r, Throwable cause, boolean leaseLost, boolean failOver, boolean tryAnother) {
        if (leaseLost) {
            CompletableFuture<Void> fenced = volume.failFenced(r, cause); // fences the volume, whoever answered
            if (failOver) {
                fenced.whenComplete((v, x) -> result.completeExceptionally(Failures.cause(x)));
            }
            return;
        }
        if (ReplicaOps.replicaFault(cause)) {
            slab.fail(r, Failures.reason(cause)); // out at once, as for any failed read
        }
        if (tryAnother) {
            hedger.watch(this); // its deadline has passed: the next duty cycle tries another replica, if any
        }
        if (failOver) {
            if (!ReplicaOps.replicaFault(cause) || attempt >= volume.replicas() + 1) {
                result.completeExceptionally(volume.ioError(slab, "read", cause));
            } else {
                volume.reads.readSlab(slab, offset, dst, attempt + 1).whenComplete((v, x) -> {
                    if (x == null) {
                        result.complete(null);
                    } else {
                        result.completeExceptionally(Failures.cause(x));
                    }
                });
            }
        }
    }
}
