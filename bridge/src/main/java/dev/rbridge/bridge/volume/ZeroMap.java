package dev.rbridge.bridge.volume;

import dev.rbridge.nbd.protocol.Nbd;

import java.util.concurrent.atomic.AtomicLongArray;

/**
 * Which 4 KiB blocks of an allocated slab are known to read as zeroes since a TRIM or WRITE_ZEROES (and whether the
 * memserver gave their memory back), so BLOCK_STATUS can report them. Created on a slab's first zeroing; lost on a
 * bridge restart, after which the slab reports data again (always a correct answer).
 */
final class ZeroMap {
    static final int BLOCK_SHIFT = 12;

    private final AtomicLongArray zero;
    private final AtomicLongArray hole;

    ZeroMap(long slabLength) {
        int blocks = (int) ((slabLength + (1 << BLOCK_SHIFT) - 1) >>> BLOCK_SHIFT);
        this.zero = new AtomicLongArray((blocks + 63) / 64);
        this.hole = new AtomicLongArray((blocks + 63) / 64);
    }

    /** Marks the whole blocks inside {@code [offset, offset+length)}. */
    void mark(long offset, long length, boolean punched) {
        long first = (offset + (1 << BLOCK_SHIFT) - 1) >>> BLOCK_SHIFT;
        long end = (offset + length) >>> BLOCK_SHIFT;
        for (long b = first; b < end; b++) {
            set(zero, b, true);
            set(hole, b, punched);
        }
    }

    /** Forgets every block {@code [offset, offset+length)} touches (a write is coming). */
    void clear(long offset, long length) {
        long first = offset >>> BLOCK_SHIFT;
        long last = (offset + length - 1) >>> BLOCK_SHIFT;
        for (long b = first; b <= last; b++) {
            set(zero, b, false);
            set(hole, b, false);
        }
    }

    /** NBD base:allocation flags of the block holding {@code offset}. */
    int state(long offset) {
        long b = offset >>> BLOCK_SHIFT;
        if (!get(zero, b)) {
            return 0;
        }
        return Nbd.STATE_ZERO | (get(hole, b) ? Nbd.STATE_HOLE : 0);
    }

    private static boolean get(AtomicLongArray a, long bit) {
        return (a.get((int) (bit >>> 6)) & (1L << bit)) != 0;
    }

    private static void set(AtomicLongArray a, long bit, boolean on) {
        int i = (int) (bit >>> 6);
        long mask = 1L << bit;
        long cur;
        do {
            cur = a.get(i);
            if (((cur & mask) != 0) == on) {
                return;
            }
        } while (!a.compareAndSet(i, cur, on ? cur | mask : cur & ~mask));
    }
}
