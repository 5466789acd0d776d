package dev.rbridge.bridge.volume;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.locks.LockSupport;

/**
 * Keeps a rebuild's copy of one chunk from racing a write to the same chunk. A writer counts itself into every chunk it
 * touches and then looks at the gate; the copier closes the gate on a chunk and then waits for that chunk's count to
 * reach zero. Both sides write before they read (volatile and atomic accesses are sequentially consistent), so either
 * the copier sees the writer's count and waits for it, or the writer sees the closed gate and waits for the copy.
 * Writes that started after the copy landed reach the new replica themselves.
 */
final class RebuildGate {
    final int chunkSize;
    private final AtomicIntegerArray inFlight;
    private volatile int closedChunk = -1;
    private volatile CompletableFuture<Void> reopened = CompletableFuture.completedFuture(null);

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
        int closed = closedChunk;
        if (closed >= first && closed <= last) {
            CompletableFuture<Void> wait = reopened;
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

    /** Copier: no new write may enter {@code chunk} until {@link #open}; returns once the ones inside have left. */
    void close(int chunk, long timeoutNanos) throws TimeoutException {
        reopened = new CompletableFuture<>();
        closedChunk = chunk;
        long deadline = System.nanoTime() + timeoutNanos;
        while (inFlight.get(chunk) != 0) {
            if (System.nanoTime() - deadline > 0) {
                open();
                throw new TimeoutException("writes to chunk " + chunk + " did not finish");
            }
            LockSupport.parkNanos(20_000);
        }
    }

    void open() {
        CompletableFuture<Void> r = reopened;
        closedChunk = -1;
        r.complete(null);
    }
}
