package dev.rbridge.nbd.server;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.junit.jupiter.api.Test;

class BufferPoolTest {
    private static final int MAX = 1 << 20;

    @Test
    void acquireReturnsADirectBufferOfTheRequestedLength() {
        BufferPool pool = new BufferPool(MAX, 64L << 20);
        for (int length : new int[]{0, 1, 100, 4095, 4096, 4097, 65536, 65537, MAX - 1, MAX}) {
            ByteBuffer b = pool.acquire(length);
            assertTrue(b.isDirect(), "direct for " + length);
            assertEquals(0, b.position(), "position for " + length);
            assertEquals(length, b.limit(), "limit for " + length);
            assertEquals(length, b.remaining());
            assertTrue(b.capacity() >= length);
            assertTrue(b.capacity() < Math.max(2 * length, 4097), "capacity " + b.capacity() + " for " + length);
        }
    }

    @Test
    void releasedBufferIsReusedForTheSameSizeClass() {
        BufferPool pool = new BufferPool(MAX, 64L << 20);
        ByteBuffer b = pool.acquire(5000);
        long carved = BufferPool.BLOCK_BYTES - 8192; // the rest of the 8 KiB class's first block
        assertEquals(carved, pool.idleBytes());
        b.position(100).limit(200); // left in any state by its user
        pool.release(b);
        assertEquals(carved + b.capacity(), pool.idleBytes());
        ByteBuffer c = pool.acquire(6000); // same 8 KiB class: the buffer released last comes first
        assertSame(b, c);
        assertEquals(0, c.position());
        assertEquals(6000, c.limit());
        assertEquals(carved, pool.idleBytes());

        pool.release(c);
        ByteBuffer small = pool.acquire(100); // the 4 KiB class is empty
        assertNotSame(c, small);
        ByteBuffer bigger = pool.acquire(9000); // the 16 KiB class is empty
        assertNotSame(c, bigger);
        assertSame(c, pool.acquire(8192));
    }

    @Test
    void buffersAreCarvedHalfAPageIntoTheirPagesWithoutOverlap() {
        RecordingMemory memory = new RecordingMemory();
        BufferPool pool = new BufferPool(MAX, 64L << 20, memory);
        int count = BufferPool.BLOCK_BYTES / 4096;
        Set<Long> seen = new HashSet<>();
        for (int i = 0; i < count; i++) {
            long at = address(pool.acquire(4096));
            assertEquals(BufferPool.PAGE_OFFSET, at % 4096, "half a page in: see BufferPool on 4K aliasing");
            assertTrue(seen.add(at), "handed out twice");
        }
        int blockBytes = BufferPool.BLOCK_BYTES + 4096; // a page more, for the offset
        assertEquals(List.of(blockBytes), memory.allocated, "one block for the whole class");
        long block = address(memory.blocks.get(0));
        assertTrue(seen.stream().allMatch(at -> at >= block && at + 4096 <= block + blockBytes), "inside it");
        assertEquals(0, pool.idleBytes());
        pool.acquire(4096);
        assertEquals(2, memory.allocated.size(), "a class without idle buffers gets a new block");
        assertEquals(2L * BufferPool.BLOCK_BYTES, pool.heldBytes());

        BufferPool large = new BufferPool(8 << 20, 64L << 20, memory);
        large.acquire(3 << 20);
        assertEquals((4 << 20) + 4096, memory.allocated.get(2), "a buffer above the block size is a block of its own");
        assertEquals(0, large.idleBytes());
    }

    @Test
    void trimGivesWholeIdleBlocksBackBeyondRetainBytesAndKeepsBlocksInUse() {
        RecordingMemory memory = new RecordingMemory();
        BufferPool pool = new BufferPool(MAX, 0, memory);
        ByteBuffer a = pool.acquire(4096);
        ByteBuffer b = pool.acquire(4096);
        pool.release(a);
        pool.trim();
        assertEquals(0, memory.freed.size(), "b is still in use: its block stays");
        assertEquals(BufferPool.BLOCK_BYTES - 4096, pool.idleBytes());
        assertSame(a, pool.acquire(4096), "the block's idle buffers are still handed out");
        pool.release(a);
        pool.release(b);
        pool.trim();
        assertEquals(List.of(memory.blocks.get(0)), memory.freed, "the whole block was idle: freed");
        assertEquals(0, pool.idleBytes());
        assertEquals(0, pool.heldBytes());
        ByteBuffer c = pool.acquire(4096);
        assertEquals(2, memory.allocated.size(), "a freed block's buffers are never handed out again");
        assertEquals(address(memory.blocks.get(1)) + BufferPool.PAGE_OFFSET, address(c));
    }

    @Test
    void trimKeepsUpToRetainBytesIdleFreeingTheLargestClassesFirst() {
        RecordingMemory memory = new RecordingMemory();
        BufferPool pool = new BufferPool(MAX, BufferPool.BLOCK_BYTES, memory);
        ByteBuffer small = pool.acquire(4096);
        ByteBuffer large = pool.acquire(65536);
        pool.release(small);
        pool.release(large);
        assertEquals(2L * BufferPool.BLOCK_BYTES, pool.idleBytes());
        pool.trim();
        assertEquals(BufferPool.BLOCK_BYTES, pool.idleBytes(), "retainBytes stay idle");
        assertEquals(List.of(memory.blocks.get(1)), memory.freed, "the 64 KiB class's block went first");
        assertSame(small, pool.acquire(4096));
        pool.trim();
        assertEquals(1, memory.freed.size(), "nothing idle beyond retainBytes");
    }

    @Test
    void aBlockThatCannotBeFreedLosesNoOtherBuffer() {
        RecordingMemory failing = new RecordingMemory() {
            @Override
            public void free(ByteBuffer block) {
                super.free(block);
                throw new IllegalStateException("deregistration failed");
            }
        };
        BufferPool pool = new BufferPool(MAX, 0, failing);
        int perBlock = BufferPool.BLOCK_BYTES / 4096;
        List<ByteBuffer> first = new ArrayList<>();
        for (int i = 0; i < perBlock; i++) {
            first.add(pool.acquire(4096));
        }
        ByteBuffer inUse = pool.acquire(4096); // the class's second block, kept partly in use
        first.forEach(pool::release);
        assertThrows(IllegalStateException.class, pool::trim);
        assertEquals(1, failing.freed.size(), "the wholly idle first block was given back");
        assertEquals(BufferPool.BLOCK_BYTES - 4096, pool.idleBytes(), "the second block's idle buffers still count");
        for (int i = 1; i < perBlock; i++) {
            pool.acquire(4096);
        }
        assertEquals(2, failing.allocated.size(), "and are still handed out: no new block was needed");
        pool.release(inUse);
    }

    @Test
    void trimDropsIdleBuffersThatAreNotFromItsBlocks() {
        BufferPool pool = new BufferPool(MAX, 0);
        ByteBuffer foreign = ByteBuffer.allocateDirect(4096);
        pool.release(foreign);
        assertEquals(4096, pool.idleBytes());
        pool.trim();
        assertEquals(0, pool.idleBytes());
        assertNotSame(foreign, pool.acquire(4096));
    }

    @Test
    void bufferLargerThanTheLargestClassIsServedButNotPooled() {
        BufferPool pool = new BufferPool(65536, 64L << 20);
        ByteBuffer b = pool.acquire(65537);
        assertTrue(b.isDirect());
        assertEquals(0, b.position());
        assertEquals(65537, b.limit());
        pool.release(b);
        assertEquals(0, pool.idleBytes());
        assertNotSame(b, pool.acquire(65537));

        ByteBuffer atMax = pool.acquire(65536);
        long idle = pool.idleBytes();
        pool.release(atMax);
        assertEquals(idle + 65536, pool.idleBytes());
        assertSame(atMax, pool.acquire(40000));
    }

    @Test
    void foreignBuffersAreNotPooled() {
        BufferPool pool = new BufferPool(MAX, 64L << 20);
        pool.release(null);
        pool.release(ByteBuffer.allocate(4096)); // heap
        pool.release(ByteBuffer.allocateDirect(5000)); // not a class size
        assertEquals(0, pool.idleBytes());
        ByteBuffer b = pool.acquire(4096);
        assertTrue(b.isDirect());
        assertEquals(4096, b.capacity());
    }

    @Test
    void concurrentUseNeverHandsOutABufferTwice() throws Exception {
        BufferPool pool = new BufferPool(MAX, 1 << 20);
        Set<Long> held = ConcurrentHashMap.newKeySet(); // by address: two slices over the same bytes count as one
        ExecutorService executor = Executors.newFixedThreadPool(5);
        AtomicBoolean done = new AtomicBoolean();
        try {
            Future<?> trimmer = executor.submit(() -> { // the housekeeper's part, as often as it can
                while (!done.get()) {
                    pool.trim();
                }
                return null;
            });
            List<Future<?>> futures = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                int seed = t;
                futures.add(executor.submit(() -> {
                    Random r = new Random(seed);
                    for (int i = 0; i < 20_000; i++) {
                        int length = 1 + r.nextInt(r.nextBoolean() ? 4096 : 65536);
                        ByteBuffer b = pool.acquire(length);
                        if (!held.add(address(b))) {
                            throw new AssertionError("buffer handed out twice");
                        }
                        if (b.limit() != length || b.position() != 0) {
                            throw new AssertionError("bad buffer for " + length + ": " + b);
                        }
                        byte mark = (byte) (seed * 31 + i);
                        b.put(0, mark);
                        Thread.yield();
                        if (b.get(0) != mark) {
                            throw new AssertionError("another thread wrote into a buffer held here");
                        }
                        held.remove(address(b));
                        pool.release(b);
                    }
                    return null;
                }));
            }
            for (Future<?> f : futures) {
                f.get(60, TimeUnit.SECONDS);
            }
            done.set(true);
            trimmer.get(60, TimeUnit.SECONDS);
        } finally {
            executor.shutdownNow();
        }
        assertTrue(held.isEmpty());
        assertEquals(pool.heldBytes(), pool.idleBytes(), "everything released is idle");
        pool.trim();
        assertTrue(pool.heldBytes() <= 1 << 20, "held after trimming " + pool.heldBytes());
    }

    /** Plain direct blocks, recording what the pool asks for. */
    private static class RecordingMemory implements PayloadMemory {
        final List<Integer> allocated = new ArrayList<>();
        final List<ByteBuffer> blocks = new ArrayList<>();
        final List<ByteBuffer> freed = new ArrayList<>();

        @Override
        public ByteBuffer allocate(int bytes) {
            ByteBuffer b = PayloadMemory.DIRECT.allocate(bytes);
            allocated.add(bytes);
            blocks.add(b);
            return b;
        }

        @Override
        public void free(ByteBuffer block) {
            freed.add(block);
        }
    }

    private static long address(ByteBuffer b) {
        return MemorySegment.ofBuffer(b).address();
    }
}
