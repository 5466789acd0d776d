package dev.rbridge.nbd.device;

import dev.rbridge.memory.AnonymousMemory;
import dev.rbridge.nbd.protocol.Nbd;

import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * An in-memory sparse block device: an {@link AnonymousMemory} mapping, so RAM is used only for blocks that were
 * written, and TRIM or WRITE_ZEROES of whole 4 KiB blocks give that RAM back. Two bitmaps per 4 KiB block answer
 * BLOCK_STATUS: <em>allocated</em> (clear = hole) and <em>zero</em> (allocated but known to read as zeroes, left by
 * WRITE_ZEROES with NO_HOLE). Every operation completes on the caller's thread.
 *
 * <p>Concurrent requests on disjoint ranges are safe (bitmap words are updated atomically); overlapping requests in
 * flight at once have no defined order, as in NBD itself.
 */
public final class SparseMemoryDevice implements BlockDevice {
    public static final int BLOCK_SHIFT = 12;
    public static final int BLOCK_SIZE = 1 << BLOCK_SHIFT;

    private static final VarHandle WORDS = MethodHandles.arrayElementVarHandle(long[].class);
    private static final CompletableFuture<Void> DONE = CompletableFuture.completedFuture(null);

    private final long size;
    private final AnonymousMemory memory;
    private final MemorySegment data;
    private final long[] allocated;
    private final long[] zero;

    public SparseMemoryDevice(long size) {
        if (size <= 0) {
            throw new IllegalArgumentException("device size must be positive: " + size);
        }
        this.size = size;
        this.memory = AnonymousMemory.map(size);
        this.data = memory.segment();
        long blocks = (size + BLOCK_SIZE - 1) >>> BLOCK_SHIFT;
        long words = (blocks + 63) >>> 6;
        if (words > Integer.MAX_VALUE - 8) {
            memory.close();
            throw new IllegalArgumentException("device size " + size + " is too large for the block map");
        }
        this.allocated = new long[(int) words];
        this.zero = new long[(int) words];
    }

    @Override
    public long size() {
        return size;
    }

    @Override
    public CompletableFuture<Void> read(long offset, ByteBuffer dst) {
        int length = dst.remaining();
        MemorySegment.copy(data, offset, MemorySegment.ofBuffer(dst), 0, length);
        dst.position(dst.limit());
        return DONE;
    }

    @Override
    public CompletableFuture<Void> write(long offset, ByteBuffer src, boolean fua) {
        int length = src.remaining();
        if (length == 0) {
            return DONE;
        }
        MemorySegment.copy(MemorySegment.ofBuffer(src), 0, data, offset, length);
        long first = offset >>> BLOCK_SHIFT;
        long last = (offset + length - 1) >>> BLOCK_SHIFT;
        setRange(allocated, first, last + 1);
        clearRange(zero, first, last + 1);
        return DONE;
    }

    @Override
    public CompletableFuture<Void> flush() {
        return DONE; // RAM is the storage: a completed write is already as durable as it will get
    }

    @Override
    public CompletableFuture<Void> trim(long offset, long length, boolean fua) {
        zeroRange(offset, length, true);
        return DONE;
    }

    @Override
    public CompletableFuture<Void> writeZeroes(long offset, long length, boolean mayPunchHole, boolean fua) {
        zeroRange(offset, length, mayPunchHole);
        return DONE;
    }

    @Override
    public boolean fastZero() {
        return true;
    }

    /**
     * Whole blocks become holes (memory released) or, with {@code punch} false, allocated zero blocks; partial
     * blocks at the ends are zeroed in place unless they are holes already.
     */
    private void zeroRange(long offset, long length, boolean punch) {
        if (length == 0) {
            return;
        }
        long end = offset + length;
        long firstWhole = (offset + BLOCK_SIZE - 1) >>> BLOCK_SHIFT;
        long endWhole = end == size ? (end + BLOCK_SIZE - 1) >>> BLOCK_SHIFT : end >>> BLOCK_SHIFT;
        if (firstWhole >= endWhole) {
            zeroPartial(offset, end);
            return;
        }
        zeroPartial(offset, Math.min(end, firstWhole << BLOCK_SHIFT));
        zeroPartial(Math.max(offset, endWhole << BLOCK_SHIFT), end);
        long from = firstWhole << BLOCK_SHIFT;
        long to = Math.min(endWhole << BLOCK_SHIFT, data.byteSize());
        if (punch) {
            // Clear the map first: a concurrent BLOCK_STATUS may call a block a hole early, never data that is gone.
            clearRange(allocated, firstWhole, endWhole);
            clearRange(zero, firstWhole, endWhole);
            memory.release(from, to - from);
        } else {
            data.asSlice(from, to - from).fill((byte) 0);
            setRange(allocated, firstWhole, endWhole);
            setRange(zero, firstWhole, endWhole);
        }
    }

    /** Zeroes [from, to), which holds no whole block, one block at a time: a hole already reads as zeroes. */
    private void zeroPartial(long from, long to) {
        for (long pos = from; pos < to;) {
            long blockEnd = Math.min(to, ((pos >>> BLOCK_SHIFT) + 1) << BLOCK_SHIFT);
            if (isSet(allocated, pos >>> BLOCK_SHIFT)) {
                // A data block with a zeroed part is still data; only whole blocks become known-zero.
                data.asSlice(pos, blockEnd - pos).fill((byte) 0);
            }
            pos = blockEnd;
        }
    }

    @Override
    public CompletableFuture<List<Extent>> blockStatus(long offset, long length, int maxExtents) {
        List<Extent> extents = new ArrayList<>();
        long end = Math.min(size, offset + length);
        long pos = offset;
        while (pos < end && extents.size() < maxExtents) {
            long block = pos >>> BLOCK_SHIFT;
            int state = stateOf(block);
            long next = block + 1;
            long lastBlock = (end - 1) >>> BLOCK_SHIFT;
            while (next <= lastBlock) {
                if (state == (Nbd.STATE_HOLE | Nbd.STATE_ZERO) && (next & 63) == 0 && next + 63 <= lastBlock
                        && (long) WORDS.getAcquire(allocated, (int) (next >>> 6)) == 0) {
                    next += 64; // skip a whole word of holes at once
                    continue;
                }
                if (stateOf(next) != state) {
                    break;
                }
                next++;
            }
            long runEnd = Math.min(end, next << BLOCK_SHIFT);
            extents.add(new Extent(runEnd - pos, state));
            pos = runEnd;
        }
        return CompletableFuture.completedFuture(extents);
    }

    private int stateOf(long block) {
        if (!isSet(allocated, block)) {
            return Nbd.STATE_HOLE | Nbd.STATE_ZERO;
        }
        return isSet(zero, block) ? Nbd.STATE_ZERO : 0;
    }

    /** Bytes of RAM the written blocks hold (an upper bound of what the kernel backs). */
    public long allocatedBytes() {
        long blocks = 0;
        for (int i = 0; i < allocated.length; i++) {
            blocks += Long.bitCount((long) WORDS.getAcquire(allocated, i));
        }
        return blocks << BLOCK_SHIFT;
    }

    private static boolean isSet(long[] bits, long block) {
        return ((long) WORDS.getAcquire(bits, (int) (block >>> 6)) & (1L << block)) != 0;
    }

    private static void setRange(long[] bits, long from, long to) {
        for (long b = from; b < to;) {
            int word = (int) (b >>> 6);
            long wordEnd = Math.min(to, ((long) word + 1) << 6);
            long mask = mask(b, wordEnd);
            WORDS.getAndBitwiseOrRelease(bits, word, mask);
            b = wordEnd;
        }
    }

    private static void clearRange(long[] bits, long from, long to) {
        for (long b = from; b < to;) {
            int word = (int) (b >>> 6);
            long wordEnd = Math.min(to, ((long) word + 1) << 6);
            long mask = mask(b, wordEnd);
            WORDS.getAndBitwiseAndRelease(bits, word, ~mask);
            b = wordEnd;
        }
    }

    /** Bits [from, to) of the word holding {@code from}; {@code to} is at most the next word boundary. */
    private static long mask(long from, long to) {
        int lo = (int) (from & 63);
        int n = (int) (to - from);
        long m = n == 64 ? -1L : ((1L << n) - 1);
        return m << lo;
    }

    @Override
    public void close() {
        memory.close();
    }
}
