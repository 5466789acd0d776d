package dev.rbridge.bridge.volume;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Native buffers that hedged reads land in. A hedged read cannot use the caller's buffer: the attempt that loses may
 * still be writing into its buffer after the winner was returned (a read posted to a memserver cannot be called back),
 * so each attempt reads into one of these and the winner is copied out. Sizes are powers of two from 4 KiB; each size
 * keeps at most {@link #IDLE_PER_SIZE} idle buffers, the rest go to the garbage collector ({@link Arena#ofAuto}). The
 * bytes taken at once are bounded too: past the bound a read is not hedged and goes straight into the caller's buffer.
 */
final class ScratchBuffers {
    static final int IDLE_PER_SIZE = 64;
    private static final int MIN_SHIFT = 12;

    private final ConcurrentLinkedQueue<MemorySegment>[] idle;
    private final AtomicInteger[] idleCount;
    private final long maxInUse;
    private final AtomicLong inUse = new AtomicLong();

    /** Buffers of up to {@code maxBytes}; at most {@code maxInUse} bytes of them taken and not given back at once. */
    @SuppressWarnings("unchecked")
    ScratchBuffers(int maxBytes, long maxInUse) {
        this.maxInUse = maxInUse;
        int classes = Math.max(1, 32 - Integer.numberOfLeadingZeros(Math.max(1, maxBytes - 1)) - MIN_SHIFT + 1);
        idle = (ConcurrentLinkedQueue<MemorySegment>[]) new ConcurrentLinkedQueue<?>[classes];
        idleCount = new AtomicInteger[classes];
        for (int i = 0; i < classes; i++) {
            idle[i] = new ConcurrentLinkedQueue<>();
            idleCount[i] = new AtomicInteger();
        }
    }

    private static int sizeClass(long bytes) {
        return Math.max(0, 64 - Long.numberOfLeadingZeros(Math.max(1, bytes - 1)) - MIN_SHIFT);
    }

    /** A buffer of at least {@code bytes} (up to the size given at construction), or null when too many are taken. */
    MemorySegment take(long bytes) {
        int c = sizeClass(bytes);
        long size = 1L << (c + MIN_SHIFT);
        if (inUse.addAndGet(size) > maxInUse) {
            inUse.addAndGet(-size);
            return null;
        }
        MemorySegment m = idle[c].poll();
        if (m != null) {
            idleCount[c].decrementAndGet();
            return m;
        }
        return Arena.ofAuto().allocate(size, 4096);
    }

    /** Gives back a buffer {@link #take} returned, once nothing writes into it any more. */
    void give(MemorySegment m) {
        inUse.addAndGet(-m.byteSize());
        int c = sizeClass(m.byteSize());
        if (idleCount[c].incrementAndGet() <= IDLE_PER_SIZE) {
            idle[c].add(m);
        } else {
            idleCount[c].decrementAndGet();
        }
    }

    /** Bytes of buffers taken and not given back. */
    long inUse() {
        return inUse.get();
    }

    /** Idle buffers kept, over every size. */
    int idle() {
        int n = 0;
        for (AtomicInteger i : idleCount) {
            n += i.get();
        }
        return n;
    }
}
