package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.memservers.RemoteOpMetrics;
import dev.rbridge.common.Failures;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * Remote operations on one replica as the data path issues them: counted in flight on their memserver and recorded
 * in its metrics, and their failures told apart (a lost lease, a replica fault, a request this bridge got wrong).
 */
final class ReplicaOps {
    private ReplicaOps() {}

    /** One remote operation for one replica of a slab piece. */
    interface ReplicaOp {
        CompletableFuture<Void> apply(Replica r);
    }

    /**
     * Counts a remote operation as in flight on its memserver until it completes. The future returned is the counting
     * stage, not the operation's: a CompletableFuture runs its dependents last-registered-first, so a caller's stage
     * hung on the operation itself would run (and answer the volume's caller) before the count dropped. A failure
     * arrives wrapped in a CompletionException ({@code Failures.cause} unwraps it).
     */
    static CompletableFuture<Void> counted(Replica r, RemoteOpMetrics.Op kind, long bytes, ReplicaOp op) {
        MemserverLink link = r.link();
        AtomicLong n = link.inFlight;
        RemoteOpMetrics metrics = link.metrics;
        boolean timed = metrics != RemoteOpMetrics.NONE;
        n.incrementAndGet();
        long start = timed ? System.nanoTime() : 0;
        CompletableFuture<Void> f;
        try {
            f = op.apply(r);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e); // a synchronous throw must not leak the in-flight counts
        }
        LongAdder done = link.completed;
        if (f.isDone()) { // completed inline (the local transport, an early failure): no completion stage needed
            n.decrementAndGet();
            done.increment();
            if (timed) {
                metrics.completed(kind, bytes, System.nanoTime() - start, f.isCompletedExceptionally());
            }
        } else if (timed) {
            return f.whenComplete((v, e) -> {
                n.decrementAndGet();
                done.increment();
                metrics.completed(kind, bytes, System.nanoTime() - start, e != null);
            });
        } else {
            return f.whenComplete((v, e) -> {
                n.decrementAndGet();
                done.increment();
            });
        }
        return f;
    }

    /** A replica's memserver refused its key or the volume as another client's: its lease went elsewhere. */
    static boolean leaseLost(Throwable t) {
        return Failures.cause(t) instanceof RemoteMemoryException e && e.status() == Status.ACCESS_DENIED;
    }

    /** Errors that mean the replica (or its memserver) is unusable, as opposed to a request this bridge got wrong. */
    static boolean replicaFault(Throwable t) {
        if (t instanceof RemoteMemoryException e) {
            return switch (e.status()) {
                case BAD_REQUEST, OUT_OF_RANGE -> false;
                default -> true;
            };
        }
        return false;
    }
}
