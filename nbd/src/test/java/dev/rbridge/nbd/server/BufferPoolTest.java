package dev.rbridge.nbd.server;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

class BufferPoolTest {
    private static final int MAX = 1 << 20;

    @Test
    void acquireReturnsADirectBufferOfTheRequestedLength() {
        BufferPool pool = new BufferPool(MAX, 64L << 20);
        for (int length : new int[] {0, 1, 100, 4095, 4096, 4097, 65536, 65537, MAX - 1, MAX}) {
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
        assertEquals(0, pool.idleBytes());
        b.position(100).limit(200); // left in any state by its user
        pool.release(b);
        assertEquals(b.capacity(), pool.idleBytes());
        ByteBuffer c = pool.acquire(6000); // same 8 KiB class
        assertSame(b, c);
        assertEquals(0, c.position());
        assertEquals(6000, c.limit());
        assertEquals(0, pool.idleBytes());

        pool.release(c);
        ByteBuffer small = pool.acquire(100); // the 4 KiB class is empty
        assertNotSame(c, small);
        ByteBuffer bigger = pool.acquire(9000); // the 16 KiB class is empty
        assertNotSame(c, bigger);
        assertSame(c, pool.acquire(8192));
    }

    @Test
    void retainBytesIsHonoured() {
        BufferPool pool = new BufferPool(MAX, 3 * 4096);
        List<ByteBuffer> first = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            first.add(pool.acquire(4096));
        }
        first.forEach(pool::release);
        assertEquals(3 * 4096, pool.idleBytes(), "only retainBytes are kept idle");

        Set<ByteBuffer> reused = Collections.newSetFromMap(new IdentityHashMap<>());
        Set<ByteBuffer> released = Collections.newSetFromMap(new IdentityHashMap<>());
        released.addAll(first);
        for (int i = 0; i < 5; i++) {
            ByteBuffer b = pool.acquire(4096);
            if (released.contains(b)) {
                reused.add(b);
            }
        }
        assertEquals(3, reused.size(), "the kept buffers come back, the others were dropped");
        assertEquals(0, pool.idleBytes());

        BufferPool none = new BufferPool(MAX, 0);
        ByteBuffer b = none.acquire(10);
        none.release(b);
        assertEquals(0, none.idleBytes());
        assertNotSame(b, none.acquire(10));

        // a single buffer larger than what may be retained is not kept either
        BufferPool small = new BufferPool(MAX, 8192);
        ByteBuffer large = small.acquire(65536);
        small.release(large);
        assertEquals(0, small.idleBytes());
        assertNotSame(large, small.acquire(65536));
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
        pool.release(atMax);
        assertEquals(65536, pool.idleBytes());
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
        Set<IdentityKey> held = ConcurrentHashMap.newKeySet(); // ByteBuffer.equals compares content, not identity
        ExecutorService executor = Executors.newFixedThreadPool(4);
        try {
            List<Future<?>> futures = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                int seed = t;
                futures.add(executor.submit(() -> {
                    Random r = new Random(seed);
                    for (int i = 0; i < 20_000; i++) {
                        int length = 1 + r.nextInt(r.nextBoolean() ? 4096 : 65536);
                        ByteBuffer b = pool.acquire(length);
                        if (!held.add(new IdentityKey(b))) {
                            throw new AssertionError("buffer handed out twice");
                        }
                        if (b.limit() != length || b.position() != 0) {
                            throw new AssertionError("bad buffer for " + length + ": " + b);
                        }
                        held.remove(new IdentityKey(b));
                        pool.release(b);
                        if (pool.idleBytes() > (1 << 20) + 65536 * 4) {
                            throw new AssertionError("idle bytes " + pool.idleBytes());
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : futures) {
                f.get(60, TimeUnit.SECONDS);
            }
        } finally {
            executor.shutdownNow();
        }
        assertTrue(held.isEmpty());
        assertTrue(pool.idleBytes() > 0 && pool.idleBytes() <= 1 << 20, "idle " + pool.idleBytes());
    }

    private record IdentityKey(ByteBuffer buffer) {
        @Override
        public boolean equals(Object o) {
            return o instanceof IdentityKey k && k.buffer == buffer;
        }

        @Override
        public int hashCode() {
            return System.identityHashCode(buffer);
        }
    }
}
