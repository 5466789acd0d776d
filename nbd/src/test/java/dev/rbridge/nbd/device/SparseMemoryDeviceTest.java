package dev.rbridge.nbd.device;

import dev.rbridge.memory.AnonymousMemory;
import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Function;

import org.junit.jupiter.api.Test;

import dev.rbridge.nbd.protocol.Nbd;

class SparseMemoryDeviceTest {
    private static final int B = SparseMemoryDevice.BLOCK_SIZE;
    private static final int DATA = 0;
    private static final int ZERO = Nbd.STATE_ZERO;
    private static final int HOLE = Nbd.STATE_HOLE | Nbd.STATE_ZERO;

    private static byte[] read(BlockDevice d, long offset, int length) {
        ByteBuffer b = ByteBuffer.allocate(length);
        d.read(offset, b).join();
        return b.array();
    }

    private static void write(BlockDevice d, long offset, byte[] data) {
        d.write(offset, ByteBuffer.wrap(data), false).join();
    }

    private static List<Extent> status(BlockDevice d, long offset, long length, int maxExtents) {
        return d.blockStatus(offset, length, maxExtents).join();
    }

    private static byte[] random(Random r, int n) {
        byte[] b = new byte[n];
        r.nextBytes(b);
        return b;
    }

    private static List<Extent> extents(long... lengthStatePairs) {
        List<Extent> l = new ArrayList<>();
        for (int i = 0; i < lengthStatePairs.length; i += 2) {
            l.add(new Extent(lengthStatePairs[i], (int) lengthStatePairs[i + 1]));
        }
        return l;
    }

    /** What blockStatus must answer for a per-block state array: runs of equal state, clipped to the request. */
    private static List<Extent> model(int[] blockStates, long size, long offset, long length, int maxExtents) {
        List<Extent> out = new ArrayList<>();
        long end = Math.min(size, offset + length);
        long pos = offset;
        while (pos < end && out.size() < maxExtents) {
            int state = blockStates[(int) (pos / B)];
            long next = pos;
            while (next < end && blockStates[(int) (next / B)] == state) {
                next = Math.min(end, (next / B + 1) * B);
            }
            out.add(new Extent(next - pos, state));
            pos = next;
        }
        return out;
    }

    @Test
    void roundTripsAtUnalignedOffsets() {
        Random r = new Random(1);
        int size = 1 << 20;
        byte[] model = new byte[size];
        try (SparseMemoryDevice d = new SparseMemoryDevice(size)) {
            assertEquals(size, d.size());
            assertArrayEquals(new byte[size], read(d, 0, size), "a new device reads as zeroes");
            long[][] writes = {{1, 1}, {4095, 2}, {8191, 3}, {100_000, 20_000}, {B * 7 + 13, B * 3}, {size - 5, 5},
                    {0, 1}, {4000, 300}};
            for (long[] w : writes) {
                byte[] data = random(r, (int) w[1]);
                write(d, w[0], data);
                System.arraycopy(data, 0, model, (int) w[0], data.length);
                assertArrayEquals(data, read(d, w[0], data.length), "read back at " + w[0]);
            }
            assertArrayEquals(model, read(d, 0, size));
            for (int i = 0; i < 200; i++) {
                int off = r.nextInt(size);
                int len = 1 + r.nextInt(Math.min(size - off, 10_000));
                assertArrayEquals(Arrays.copyOfRange(model, off, off + len), read(d, off, len),
                        "read " + off + "+" + len);
            }
        }
    }

    @Test
    void readAndWriteUseOnlyPositionToLimit() {
        try (SparseMemoryDevice d = new SparseMemoryDevice(3 * B)) {
            ByteBuffer src = ByteBuffer.allocateDirect(8);
            src.put(new byte[]{1, 2, 3, 4, 5, 6, 7, 8}).position(2).limit(6);
            d.write(B - 2, src, true).join();
            assertArrayEquals(new byte[]{0, 3, 4, 5, 6, 0}, read(d, B - 3, 6));

            byte[] backing = new byte[16];
            Arrays.fill(backing, (byte) 0x77);
            ByteBuffer dst = ByteBuffer.wrap(backing, 3, 7); // position 3, limit 10
            d.read(B - 3, dst).join();
            assertArrayEquals(new byte[]{0x77, 0x77, 0x77, 0, 3, 4, 5, 6, 0, 0, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77},
                    backing);

            ByteBuffer direct = ByteBuffer.allocateDirect(6).position(1).limit(5);
            d.read(B - 2, direct).join();
            byte[] got = new byte[4];
            direct.get(1, got);
            assertArrayEquals(new byte[]{3, 4, 5, 6}, got);
        }
    }

    @Test
    void sizeNotAMultipleOfTheBlockSizeWorksToItsLastByte() {
        Random r = new Random(2);
        int size = 10_000;
        try (SparseMemoryDevice d = new SparseMemoryDevice(size)) {
            assertEquals(extents(size, HOLE), status(d, 0, size, 10));
            write(d, size - 1, new byte[]{42});
            assertArrayEquals(new byte[]{42}, read(d, size - 1, 1));
            byte[] tail = random(r, size - 8190);
            write(d, 8190, tail);
            assertArrayEquals(tail, read(d, 8190, tail.length));
            assertEquals(extents(4096, HOLE, size - 4096, DATA), status(d, 0, size, 10));
            assertEquals(extents(1, DATA), status(d, size - 1, 1, 10));
            assertEquals(2L * B, d.allocatedBytes());

            // trimming to the end covers the partial last block as a whole one
            d.trim(8192, size - 8192, false).join();
            assertEquals(extents(4096, HOLE, 4096, DATA, size - 8192, HOLE), status(d, 0, size, 10));
            assertArrayEquals(new byte[size - 8192], read(d, 8192, size - 8192));
            assertArrayEquals(Arrays.copyOfRange(tail, 0, 2), read(d, 8190, 2));
            assertEquals((long) B, d.allocatedBytes());

            // a write that ends on the last byte after the trim
            write(d, size - 3, new byte[]{7, 8, 9});
            assertArrayEquals(new byte[]{0, 7, 8, 9}, read(d, size - 4, 4));
            assertEquals(extents(1808, DATA), status(d, 8192, size - 8192, 10));

            d.writeZeroes(0, size, false, false).join();
            assertEquals(extents(size, ZERO), status(d, 0, size, 10));
            assertArrayEquals(new byte[size], read(d, 0, size));
            d.trim(0, size, false).join();
            assertEquals(extents(size, HOLE), status(d, 0, size, 10));
            assertEquals(0, d.allocatedBytes());
        }
    }

    @Test
    void trimOfWholeBlocksReadsZeroesAndReportsHoles() {
        Random r = new Random(3);
        try (SparseMemoryDevice d = new SparseMemoryDevice(6 * B)) {
            byte[] all = random(r, 6 * B);
            write(d, 0, all);
            assertEquals(6L * B, d.allocatedBytes());
            assertEquals(extents(6 * B, DATA), status(d, 0, 6 * B, 10));
            d.trim(B, 3 * B, false).join();
            assertArrayEquals(new byte[3 * B], read(d, B, 3 * B));
            assertArrayEquals(Arrays.copyOfRange(all, 0, B), read(d, 0, B));
            assertArrayEquals(Arrays.copyOfRange(all, 4 * B, 6 * B), read(d, 4 * B, 2 * B));
            assertEquals(extents(B, DATA, 3 * B, HOLE, 2 * B, DATA), status(d, 0, 6 * B, 10));
            assertEquals(3L * B, d.allocatedBytes());
        }
    }

    @Test
    void trimOfPartOfABlockZeroesOnlyThoseBytesAndKeepsItData() {
        Random r = new Random(4);
        try (SparseMemoryDevice d = new SparseMemoryDevice(4 * B)) {
            byte[] all = random(r, 3 * B);
            write(d, 0, all);
            d.trim(100, 200, false).join();
            byte[] expect = all.clone();
            Arrays.fill(expect, 100, 300, (byte) 0);
            assertArrayEquals(expect, read(d, 0, 3 * B));
            assertEquals(extents(3 * B, DATA, B, HOLE), status(d, 0, 4 * B, 10));
            assertEquals(3L * B, d.allocatedBytes());

            // tail of block 0, all of block 1, head of block 2
            d.trim(B - 96, B + 96 + 50, false).join();
            Arrays.fill(expect, B - 96, 2 * B + 50, (byte) 0);
            assertArrayEquals(expect, read(d, 0, 3 * B));
            assertEquals(extents(B, DATA, B, HOLE, B, DATA, B, HOLE), status(d, 0, 4 * B, 10));
            assertEquals(2L * B, d.allocatedBytes());
        }
    }

    @Test
    void partialZeroingAcrossABoundaryOfTwoDataBlocks() {
        Random r = new Random(5);
        try (SparseMemoryDevice d = new SparseMemoryDevice(2 * B)) {
            byte[] all = random(r, 2 * B);
            write(d, 0, all);
            d.trim(4000, 200, false).join();
            Arrays.fill(all, 4000, 4200, (byte) 0);
            assertArrayEquals(all, read(d, 0, 2 * B));
            assertEquals(extents(2 * B, DATA), status(d, 0, 2 * B, 10));
        }
    }

    /**
     * A range with no whole block in it that starts in a hole and ends in a data block: the data part must read as
     * zeroes afterwards (NBD_CMD_WRITE_ZEROES must zero it; this device also promises zeroes after TRIM).
     */
    @Test
    void partialZeroingFromAHoleIntoADataBlock() {
        assertAll(
                () -> checkHoleThenData("trim", d -> d.trim(4000, 200, false)),
                () -> checkHoleThenData("writeZeroes, may punch", d -> d.writeZeroes(4000, 200, true, false)),
                () -> checkHoleThenData("writeZeroes, NO_HOLE", d -> d.writeZeroes(4000, 200, false, false)));
    }

    private static void checkHoleThenData(String what, Function<BlockDevice, CompletableFuture<Void>> zero) {
        try (SparseMemoryDevice d = new SparseMemoryDevice(2 * B)) {
            byte[] block1 = random(new Random(6), B);
            write(d, B, block1); // block 0 stays a hole
            zero.apply(d).join(); // bytes 4000..4199: tail of block 0, head of block 1
            byte[] expect = block1.clone();
            Arrays.fill(expect, 0, 200 - 96, (byte) 0);
            assertArrayEquals(new byte[B], read(d, 0, B), what);
            assertArrayEquals(expect, read(d, B, B), what + ": bytes 4096..4199 must read as zero");
        }
    }

    @Test
    void writeZeroesMayPunchHoleBehavesLikeTrim() {
        Random r = new Random(7);
        try (SparseMemoryDevice d = new SparseMemoryDevice(8 * B)) {
            byte[] all = random(r, 8 * B);
            write(d, 0, all);
            d.writeZeroes(B + 10, 4 * B, true, false).join(); // partial block 1, whole 2..4, partial block 5
            Arrays.fill(all, B + 10, 5 * B + 10, (byte) 0);
            assertArrayEquals(all, read(d, 0, 8 * B));
            assertEquals(extents(2 * B, DATA, 3 * B, HOLE, 3 * B, DATA), status(d, 0, 8 * B, 10));
            assertEquals(5L * B, d.allocatedBytes());
        }
    }

    @Test
    void writeZeroesWithoutPunchKeepsBlocksAllocatedAndZero() {
        Random r = new Random(8);
        try (SparseMemoryDevice d = new SparseMemoryDevice(8 * B)) {
            byte[] all = random(r, 8 * B);
            write(d, 0, all);
            d.writeZeroes(B - 10, 2 * B + 20, false, false).join(); // tail of 0, whole 1..2, head of 3
            Arrays.fill(all, B - 10, 3 * B + 10, (byte) 0);
            assertArrayEquals(all, read(d, 0, 8 * B));
            assertEquals(extents(B, DATA, 2 * B, ZERO, 5 * B, DATA), status(d, 0, 8 * B, 10));
            assertEquals(8L * B, d.allocatedBytes(), "NO_HOLE: nothing is released");

            // a write into a zero block makes it data again, its neighbour stays zero
            write(d, B + 5, new byte[]{1});
            assertEquals(extents(2 * B, DATA, B, ZERO, 5 * B, DATA), status(d, 0, 8 * B, 10));
            assertArrayEquals(new byte[]{0, 1, 0}, read(d, B + 4, 3));
        }
        try (SparseMemoryDevice d = new SparseMemoryDevice(8 * B)) {
            d.writeZeroes(0, 2 * B, false, false).join(); // on never-written space
            assertEquals(extents(2 * B, ZERO, 6 * B, HOLE), status(d, 0, 8 * B, 10));
            assertEquals(2L * B, d.allocatedBytes());
            assertArrayEquals(new byte[2 * B], read(d, 0, 2 * B));
            d.writeZeroes(0, B, true, false).join(); // then punched
            assertEquals(extents(B, HOLE, B, ZERO, 6 * B, HOLE), status(d, 0, 8 * B, 10));
            assertEquals((long) B, d.allocatedBytes());
        }
    }

    @Test
    void neverWrittenSpaceIsAHole() {
        try (SparseMemoryDevice d = new SparseMemoryDevice(1L << 30)) {
            assertEquals(extents(1L << 30, HOLE), status(d, 0, 1L << 30, 100));
            assertEquals(extents(12345, HOLE), status(d, 777, 12345, 100));
            assertEquals(0, d.allocatedBytes());
        }
    }

    @Test
    void blockStatusCoalescesClipsAndLimits() {
        try (SparseMemoryDevice d = new SparseMemoryDevice(16 * B)) {
            write(d, 0, new byte[2 * B]); // data, even though the bytes are zero
            d.writeZeroes(5 * B, 2 * B, false, false).join();
            write(d, 7 * B + 100, new byte[]{1});
            // blocks: 0-1 data, 2-4 hole, 5-6 zero, 7 data, 8-15 hole
            List<Extent> all = extents(2 * B, DATA, 3 * B, HOLE, 2 * B, ZERO, B, DATA, 8 * B, HOLE);
            assertEquals(all, status(d, 0, 16 * B, 100));
            assertEquals(all.subList(0, 1), status(d, 0, 16 * B, 1), "maxExtents 1");
            assertEquals(all.subList(0, 2), status(d, 0, 16 * B, 2), "maxExtents 2");
            assertEquals(all, status(d, 0, 16 * B, 5), "maxExtents exactly the number of runs");
            // clipped at both ends, starting mid-block
            assertEquals(extents(5000, DATA), status(d, 100, 5000, 100));
            assertEquals(extents(2 * B - 100, DATA, 1908, HOLE), status(d, 100, 10_000, 100));
            assertEquals(extents(5 * B - 9000, HOLE, 2 * B, ZERO, 328, DATA), status(d, 9000, 20_000, 100));
            assertEquals(extents(1, DATA), status(d, 7 * B + 4095, 1, 100));
            assertEquals(extents(1, HOLE), status(d, 8 * B, 1, 100));
            assertEquals(extents(B - 1, ZERO), status(d, 5 * B + 1, B - 1, 1));
        }
    }

    @Test
    void blockStatusMatchesAModelAcrossBitmapWords() {
        Random r = new Random(9);
        int blocks = 1001;
        long size = 1000L * B + 123;
        int[] states = new int[blocks];
        Arrays.fill(states, HOLE);
        byte[] bytes = new byte[(int) size];
        try (SparseMemoryDevice d = new SparseMemoryDevice(size)) {
            int b = 0;
            while (b < blocks) {
                int run = 1 + (r.nextInt(4) == 0 ? r.nextInt(150) : r.nextInt(5));
                int state = new int[]{DATA, ZERO, HOLE}[r.nextInt(3)];
                int end = Math.min(blocks, b + run);
                if (b < 192) {
                    end = Math.min(end, 192);
                } else if (b < 448) {
                    state = HOLE; // four whole words of holes
                    end = Math.min(end, 448);
                }
                long from = (long) b * B;
                long to = Math.min(size, (long) end * B);
                if (state == DATA) {
                    byte[] data = random(r, (int) (to - from));
                    write(d, from, data);
                    System.arraycopy(data, 0, bytes, (int) from, data.length);
                } else if (state == ZERO) {
                    d.writeZeroes(from, to - from, false, false).join();
                } else if (r.nextBoolean()) {
                    write(d, from, random(r, (int) (to - from)));
                    d.trim(from, to - from, false).join();
                }
                Arrays.fill(states, b, end, state);
                b = end;
            }
            assertArrayEquals(bytes, read(d, 0, (int) size));
            long dataBlocks = Arrays.stream(states).filter(s -> s != HOLE).count();
            assertEquals(dataBlocks * B, d.allocatedBytes());

            assertEquals(model(states, size, 0, size, Integer.MAX_VALUE), status(d, 0, size, Integer.MAX_VALUE));
            for (int i = 0; i < 2000; i++) {
                long off = r.nextInt((int) size);
                long len = 1 + (r.nextBoolean() ? r.nextInt((int) (size - off))
                        : r.nextInt((int) Math.min(3 * B, size - off)));
                int max = r.nextBoolean() ? 1 + r.nextInt(4) : 1000;
                List<Extent> got = status(d, off, len, max);
                assertEquals(model(states, size, off, len, max), got,
                        "blockStatus(" + off + ", " + len + ", " + max + ")");
                long sum = got.stream().mapToLong(Extent::length).sum();
                assertTrue(sum >= 1 && sum <= len, "extents cover " + sum + " of " + len);
                assertTrue(got.size() <= max);
            }
        }
    }

    @Test
    void largeDeviceCostsOnlyTheBlocksWritten() {
        long size = 64L << 30;
        long half = 32L << 30;
        try (SparseMemoryDevice d = new SparseMemoryDevice(size)) {
            assertEquals(size, d.size());
            assertEquals(0, d.allocatedBytes());
            write(d, 0, new byte[]{1});
            assertEquals(B, d.allocatedBytes());
            write(d, size - 1, new byte[]{2});
            assertEquals(2L * B, d.allocatedBytes());
            write(d, half - 5, new byte[]{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}); // crosses a block boundary
            assertEquals(4L * B, d.allocatedBytes());
            write(d, half - 5, new byte[]{9}); // same block again: no growth
            assertEquals(4L * B, d.allocatedBytes());

            assertArrayEquals(new byte[]{9, 2, 3, 4, 5, 6, 7, 8, 9, 10}, read(d, half - 5, 10));
            assertArrayEquals(new byte[]{2}, read(d, size - 1, 1));
            assertArrayEquals(new byte[]{0, 0}, read(d, size - 3, 2));
            assertEquals(extents(B, DATA, half - 2L * B, HOLE, 2 * B, DATA, half - 2L * B, HOLE, B, DATA),
                    status(d, 0, size, 100));

            d.trim(0, B, false).join();
            assertEquals(3L * B, d.allocatedBytes());
            assertEquals(extents(half - B, HOLE), status(d, 0, size, 1));
            d.trim(0, size, false).join();
            assertEquals(0, d.allocatedBytes());
            assertEquals(extents(size, HOLE), status(d, 0, size, 100));
            assertArrayEquals(new byte[10], read(d, half - 5, 10));
        }
    }

    @Test
    void concurrentWritersOnDisjointRanges() throws Exception {
        int threads = 4;
        int region = 1_000_003; // not a multiple of 4096: neighbours share a block
        long size = (long) threads * region;
        int blocks = (int) ((size + B - 1) / B);
        byte[][] models = new byte[threads][region];
        boolean[][] allocated = new boolean[threads][blocks];
        ExecutorService pool = Executors.newFixedThreadPool(threads + 1);
        AtomicBoolean writing = new AtomicBoolean(true);
        try (SparseMemoryDevice d = new SparseMemoryDevice(size)) {
            CountDownLatch start = new CountDownLatch(1);
            List<Callable<Void>> tasks = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                int id = t;
                tasks.add(() -> {
                    Random r = new Random(100 + id);
                    long base = (long) id * region;
                    long firstWhole = (base + B - 1) / B;
                    long endWhole = (base + region) / B;
                    start.await();
                    for (int i = 0; i < 4000; i++) {
                        if (r.nextInt(10) == 0) {
                            // trim whole blocks that lie entirely inside this region
                            long b0 = firstWhole + r.nextInt((int) (endWhole - firstWhole));
                            long b1 = Math.min(endWhole, b0 + 1 + r.nextInt(8));
                            d.trim(b0 * B, (b1 - b0) * B, false).join();
                            Arrays.fill(models[id], (int) (b0 * B - base), (int) (b1 * B - base), (byte) 0);
                            Arrays.fill(allocated[id], (int) b0, (int) b1, false);
                        } else {
                            int off = r.nextInt(region);
                            int len = 1 + r.nextInt(Math.min(region - off, 6000));
                            byte[] data = random(r, len);
                            write(d, base + off, data);
                            System.arraycopy(data, 0, models[id], off, len);
                            Arrays.fill(allocated[id], (int) ((base + off) / B), (int) ((base + off + len - 1) / B) + 1,
                                    true);
                        }
                    }
                    return null;
                });
            }
            Future<?> reader = pool.submit(() -> {
                Random r = new Random(5);
                start.await();
                while (writing.get()) {
                    long off = r.nextInt((int) size);
                    long len = 1 + r.nextInt((int) Math.min(size - off, 1 << 20));
                    long sum = status(d, off, len, 64).stream().mapToLong(Extent::length).sum();
                    if (sum < 1 || sum > len) {
                        throw new AssertionError("blockStatus covered " + sum + " of " + len);
                    }
                }
                return null;
            });
            List<Future<Void>> futures = new ArrayList<>();
            for (Callable<Void> task : tasks) {
                futures.add(pool.submit(task));
            }
            start.countDown();
            for (Future<Void> f : futures) {
                f.get(60, TimeUnit.SECONDS);
            }
            writing.set(false);
            reader.get(60, TimeUnit.SECONDS);

            byte[] all = read(d, 0, (int) size);
            for (int t = 0; t < threads; t++) {
                assertArrayEquals(models[t], Arrays.copyOfRange(all, t * region, (t + 1) * region), "region " + t);
            }
            int[] states = new int[blocks];
            long count = 0;
            for (int b = 0; b < blocks; b++) {
                boolean any = false;
                for (int t = 0; t < threads; t++) {
                    any |= allocated[t][b];
                }
                states[b] = any ? DATA : HOLE;
                count += any ? 1 : 0;
            }
            assertTrue(count > blocks / 2, "the test wrote most blocks: " + count);
            assertTrue(count < blocks, "and trimmed some: " + count);
            assertEquals(model(states, size, 0, size, Integer.MAX_VALUE), status(d, 0, size, Integer.MAX_VALUE));
            assertEquals(count * B, d.allocatedBytes());
        } finally {
            writing.set(false);
            pool.shutdownNow();
        }
    }

    @Test
    void closeTwiceIsSafe() {
        SparseMemoryDevice d = new SparseMemoryDevice(B);
        write(d, 0, new byte[]{1});
        d.close();
        d.close();
        AnonymousMemory m = AnonymousMemory.map(10);
        assertEquals(AnonymousMemory.PAGE_SIZE, m.segment().byteSize(), "rounded up to a page");
        m.close();
        m.close();
    }
}
