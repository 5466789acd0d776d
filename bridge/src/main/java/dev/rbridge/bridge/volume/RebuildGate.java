package dev.rbridge.bridge.volume;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.locks.LockSupport;

/**
 * Keeps a rebuild's copy of a chunk from racing a write to the same chunk. The copier keeps a window of consecutive
 * chunks in flight: it closes chunks one after another at the window's end and opens them from its start as their
 * copies land. A writer counts itself into every chunk it touches and then looks at the closed range; the copier
 * widens the range to a chunk and then waits for that chunk's count to reach zero. Both sides write before they read
 * (volatile and atomic accesses are sequentially consistent), so either the copier sees the writer's count and waits
 * for it, or the writer sees the closed chunk and waits until the range moves on. Writes that started after a chunk's
 * copy landed reach the new replica themselves.
 */
final class RebuildGate {
    /** No chunk closed. */
    private static final long NONE = 0;

    final int chunkSize;
    private final AtomicIntegerArray inFlight;
    /** The closed chunks {@code [from, to)}: {@code from} in the high 32 bits, {@code to} in the low; none if equal. */
    private volatile long closed = NONE;
    /** Completed when the closed range next moves on (or opens); a waiting writer then looks again. */
    private volatile CompletableFuture<Void> moved = CompletableFuture.completedFuture(null);

    RebuildGate(long slabLength, int chunkSize) {
        this.chunkSize = chunkSize;
        this.inFlight = new AtomicIntegerArray((int) ((slabLength + chunkSize - 1) / chunkSize));
    }

    int chunks() {
        return inFlight.length();
    }

    /**
     * Counts a write of {@code [offset, offset+length)} in; returns null when it may go ahead (call {@link #leave}
     * when it completes), or the future to wait for before trying again.
     */
    CompletableFuture<Void> enter(long offset, long length) {
        int first = (int) (offset / chunkSize);
        int last = (int) ((offset + length - 1) / chunkSize);
        for (int c = first; c <= last; c++) {
            inFlight.incrementAndGet(c);
        }
        long range = closed;
        if (from(range) <= last && to(range) > first) {
            CompletableFuture<Void> wait = moved;
            leave(offset, length);
            return wait;
        }
        return null;
    }

    void leave(long offset, long length) {
        int first = (int) (offset / chunkSize);
        int last = (int) ((offset + length - 1) / chunkSize);
        for (int c = first; c <= last; c++) {
            inFlight.decrementAndGet(c);
        }
    }

    /**
     * Copier: closes {@code chunk} (the one after the closed range, or any when none is closed): no new write may
     * enter it until {@link #openThrough} or {@link #open} passes it; returns once the ones inside have left.
     */
    void close(int chunk, long timeoutNanos) throws TimeoutException {
        synchronized (this) {
            long range = closed;
            if (from(range) == to(range)) {
                moved = new CompletableFuture<>();
                closed = range(chunk, chunk + 1);
            } else if (to(range) == chunk) {
                closed = range(from(range), chunk + 1);
            } else {
                throw new IllegalStateException("chunk " + chunk + " is not next to the closed chunks " + from(range)
                        + ".." + (to(range) - 1));
            }
        }
        long deadline = System.nanoTime() + timeoutNanos;
        while (inFlight.get(chunk) != 0) {
            if (System.nanoTime() - deadline > 0) {
                open();
                throw new TimeoutException("writes to chunk " + chunk + " did not finish");
            }
            LockSupport.parkNanos(20_000);
        }
    }

    /** Copier: the chunks up to and including {@code chunk} are copied; writes may enter them again. */
    synchronized void openThrough(int chunk) {
        long range = closed;
        int from = Math.max(from(range), chunk + 1);
        if (from >= to(range)) {
            open();
            return;
        }
        CompletableFuture<Void> before = moved;
        moved = new CompletableFuture<>();
        closed = range(from, to(range));
        before.complete(null);
    }

    /** Opens every chunk (the copy finished or gave up). */
    synchronized void open() {
        closed = NONE;
        moved.complete(null);
    }

    private static long range(int from, int to) {
        return ((long) from << 32) | (to & 0xFFFF_FFFFL);
    }

    private static int from(long range) {
        return (int) (range >>> 32);
    }

    private static int to(long range) {
        return (int) range;
    }
}
