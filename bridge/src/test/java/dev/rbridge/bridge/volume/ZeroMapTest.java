package dev.rbridge.bridge.volume;

import dev.rbridge.nbd.protocol.Nbd;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The zero map BLOCK_STATUS answers from: it may call a block zero only when every byte of it was zeroed and nothing
 * was written since; answering "data" is always allowed.
 */
@Timeout(60)
class ZeroMapTest {
    private static final int BLOCK = 1 << ZeroMap.BLOCK_SHIFT;
    private static final int ZERO = Nbd.STATE_ZERO;
    private static final int HOLE = Nbd.STATE_ZERO | Nbd.STATE_HOLE;

    @Test
    void aFreshMapCallsEveryBlockData() {
        ZeroMap z = new ZeroMap(64L * BLOCK);
        for (int b = 0; b < 64; b++) {
            assertEquals(0, z.state((long) b * BLOCK), "block " + b);
        }
    }

    @Test
    void onlyBlocksWhollyInsideAZeroingAreMarked() {
        ZeroMap z = new ZeroMap(8L * BLOCK);
        z.mark(100, 3L * BLOCK, true); // covers the end of block 0, blocks 1 and 2, the start of block 3
        assertEquals(0, z.state(0), "block 0 is zeroed from byte 100 only");
        assertEquals(0, z.state(99), "block 0 is zeroed from byte 100 only");
        assertEquals(HOLE, z.state(BLOCK));
        assertEquals(HOLE, z.state(2L * BLOCK + BLOCK - 1), "every offset inside a marked block");
        assertEquals(0, z.state(3L * BLOCK), "block 3 is zeroed up to byte 99 only");

        z.mark(4L * BLOCK, BLOCK - 1, true);
        assertEquals(0, z.state(4L * BLOCK), "one byte short of a block marks nothing");
        z.mark(5L * BLOCK, BLOCK, true);
        assertEquals(HOLE, z.state(5L * BLOCK), "exactly one block");
        assertEquals(0, z.state(6L * BLOCK), "and not the next");
    }

    @Test
    void aZeroingThatKeepsTheMemoryIsZeroButNoHoleUntilPunched() {
        ZeroMap z = new ZeroMap(4L * BLOCK);
        z.mark(0, 2L * BLOCK, false);
        assertEquals(ZERO, z.state(0));
        assertEquals(ZERO, z.state(BLOCK));
        z.mark(BLOCK, BLOCK, true);
        assertEquals(ZERO, z.state(0));
        assertEquals(HOLE, z.state(BLOCK), "punched afterwards");
        z.mark(BLOCK, BLOCK, false);
        assertEquals(ZERO, z.state(BLOCK), "zeroed again without punching: no longer reported a hole");
    }

    @Test
    void aWriteForgetsEveryBlockItTouchesEvenPartly() {
        ZeroMap z = new ZeroMap(4L * BLOCK);
        z.mark(0, 4L * BLOCK, true);
        z.clear(BLOCK - 1, 2); // the last byte of block 0 and the first of block 1
        assertEquals(0, z.state(0));
        assertEquals(0, z.state(BLOCK));
        assertEquals(HOLE, z.state(2L * BLOCK), "untouched");
        z.clear(3L * BLOCK + 7, 1);
        assertEquals(0, z.state(3L * BLOCK));
        assertEquals(HOLE, z.state(2L * BLOCK), "still untouched");
    }

    @Test
    void blocksAcrossBitmapWordsAndTheSlabsPartialTail() {
        long length = 200L * BLOCK + 100; // 201 blocks, the last one partial
        ZeroMap z = new ZeroMap(length);
        z.mark(63L * BLOCK, 3L * BLOCK, true); // blocks 63, 64, 65: the first two 64-bit words meet here
        for (int b = 60; b < 70; b++) {
            assertEquals(b >= 63 && b <= 65 ? HOLE : 0, z.state((long) b * BLOCK), "block " + b);
        }
        z.clear(64L * BLOCK, 1);
        assertEquals(HOLE, z.state(63L * BLOCK));
        assertEquals(0, z.state(64L * BLOCK));
        assertEquals(HOLE, z.state(65L * BLOCK));

        z.mark(199L * BLOCK, BLOCK + 100, true); // to the end of the slab
        assertEquals(HOLE, z.state(199L * BLOCK));
        assertEquals(0, z.state(200L * BLOCK), "a partial block is never whole inside a zeroing");
    }

    @Test
    void concurrentChangesToBlocksSharingAWordAreNotLost() throws Exception {
        int threads = 8;
        ZeroMap z = new ZeroMap(64L * BLOCK);
        CountDownLatch go = new CountDownLatch(1);
        List<Thread> started = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            long own = (long) t * 8 * BLOCK; // eight blocks each, all in the first 64-bit word
            started.add(Thread.ofPlatform().start(() -> {
                try {
                    go.await();
                } catch (InterruptedException e) {
                    return;
                }
                for (int i = 0; i < 20_000; i++) {
                    z.mark(own, 8L * BLOCK, (i & 1) == 0);
                    z.clear(own, 8L * BLOCK);
                }
                z.mark(own, 8L * BLOCK, true);
            }));
        }
        go.countDown();
        for (Thread t : started) {
            assertTrue(t.join(Duration.ofSeconds(30)), "a marking thread did not finish");
        }
        for (int b = 0; b < 64; b++) {
            assertEquals(HOLE, z.state((long) b * BLOCK), "block " + b + " lost its last mark");
        }
    }
}
