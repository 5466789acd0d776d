package dev.rbridge.memory;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * Which 4 KiB pages of a mapping hold data written to them, one bit each. Memory never written reads as zeroes, and
 * reading it through the mapping is not free on every kernel: most map the shared zero page on a read fault, but some
 * give the reader a page of its own, so that reading untouched anonymous memory raises the process's resident memory
 * by as much as was read. A server that read a fresh volume end to end would back all of it. So whoever serves reads asks for the runs that were written and sends zeroes for the rest without
 * touching them.
 *
 * <p>Marks and clears are atomic per word of 64 pages and visible to every thread at once. A read racing a write of
 * the same range may see the range as written or not, as it may see old or new data.
 *
 * <p>When the memory is also written by someone this class never hears of (a NIC doing one-sided RDMA WRITEs), call
 * {@link #markEverything}: from then on every page counts as written, which is always correct, only not frugal.
 */
public final class WrittenPages {
    public static final int PAGE = 4096;
    private static final VarHandle WORD = MethodHandles.arrayElementVarHandle(long[].class);

    private final long[] bits;
    private final long length;
    private volatile boolean everything;

    /** Tracks {@code length} bytes, none of them written yet. */
    public WrittenPages(long length) {
        if (length < 0) {
            throw new IllegalArgumentException("negative length " + length);
        }
        long pages = (length + PAGE - 1) / PAGE;
        if ((pages + 63) / 64 > Integer.MAX_VALUE - 8) {
            throw new IllegalArgumentException("cannot track " + length + " bytes");
        }
        this.bits = new long[(int) ((pages + 63) / 64)];
        this.length = length;
    }

    /** Marks every page that {@code [offset, offset + length)} touches as written. */
    public void mark(long offset, long length) {
        check(offset, length);
        if (length == 0 || everything) {
            return;
        }
        forPages(offset / PAGE, (offset + length - 1) / PAGE, true);
    }

    /**
     * Marks the pages lying wholly inside {@code [offset, offset + length)} as never written (they were given back to
     * the system and read as zeroes again); pages only partly inside keep their mark.
     */
    public void clear(long offset, long length) {
        check(offset, length);
        long first = (offset + PAGE - 1) / PAGE;
        long end = (offset + length) / PAGE; // exclusive
        if (offset + length == this.length) {
            end = (this.length + PAGE - 1) / PAGE; // a short last page ends where the memory does
        }
        if (first < end) {
            forPages(first, end - 1, false);
        }
    }

    /** From now on every page counts as written (see the class comment). */
    public void markEverything() {
        everything = true;
    }

    public boolean isWritten(long offset) {
        if (offset < 0 || offset >= length) {
            throw new IndexOutOfBoundsException("offset " + offset + " outside " + length + " bytes");
        }
        if (everything) {
            return true;
        }
        long page = offset / PAGE;
        return ((long) WORD.getVolatile(bits, (int) (page >>> 6)) & (1L << page)) != 0;
    }

    /**
     * Where the run starting at {@code offset} ends: the first offset after it, at most {@code end}, whose page is
     * written when {@code offset}'s is not, or the other way round.
     */
    public long runEnd(long offset, long end) {
        check(offset, end - offset);
        if (offset == end || everything) {
            return end;
        }
        long page = offset / PAGE;
        long lastPage = (end - 1) / PAGE;
        boolean written = isWritten(offset);
        while (page <= lastPage) {
            int w = (int) (page >>> 6);
            long word = (long) WORD.getVolatile(bits, w);
            long differs = (written ? ~word : word) & (-1L << page); // shifts use the low six bits of page
            if (differs != 0) {
                long at = (((long) w << 6) + Long.numberOfTrailingZeros(differs)) * PAGE;
                return Math.min(end, at);
            }
            page = ((long) w + 1) << 6;
        }
        return end;
    }

    /** Bytes in pages marked written (whole pages; all of them after {@link #markEverything}). */
    public long writtenBytes() {
        if (everything) {
            return (length + PAGE - 1) / PAGE * PAGE;
        }
        long pages = 0;
        for (int i = 0; i < bits.length; i++) {
            pages += Long.bitCount((long) WORD.getVolatile(bits, i));
        }
        return pages * PAGE;
    }

    private void forPages(long first, long last, boolean set) {
        for (long page = first; page <= last;) {
            int w = (int) (page >>> 6);
            long upTo = Math.min(last, ((long) w << 6) + 63);
            int from = (int) (page & 63);
            int to = (int) (upTo & 63);
            long mask = (to == 63 ? -1L : (1L << (to + 1)) - 1) & (-1L << from);
            if (set) {
                WORD.getAndBitwiseOr(bits, w, mask);
            } else {
                WORD.getAndBitwiseAnd(bits, w, ~mask);
            }
            page = upTo + 1;
        }
    }

    private void check(long offset, long length) {
        if (offset < 0 || length < 0 || offset > this.length - length) {
            throw new IndexOutOfBoundsException("range " + offset + "+" + length + " outside " + this.length
                    + " bytes");
        }
    }
}
