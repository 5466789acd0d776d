package dev.rbridge.common.codec;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Skipping and gathering over input split at every position: nothing beyond their bytes is consumed. */
class SkipAndGatherTest {
    private static final byte[] STREAM = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

    @Test
    void skipDropsItsBytesAndNotOneMoreWhereverTheInputIsSplit() {
        for (int split = 0; split <= STREAM.length; split++) {
            Skip s = new Skip();
            s.start(7);
            ByteBuffer first = ByteBuffer.wrap(STREAM, 0, split);
            boolean done = s.drop(first);
            assertEquals(Math.min(split, 7), first.position(), "split at " + split);
            assertEquals(split >= 7, done, "split at " + split);
            ByteBuffer rest = ByteBuffer.wrap(STREAM, first.position(), STREAM.length - first.position());
            assertTrue(s.drop(rest), "split at " + split);
            assertEquals(0, s.remaining());
            assertEquals(8, rest.get(), "split at " + split + ": the next byte is the first after the skip");
        }
    }

    @Test
    void aNegativeSkipIsRefused() {
        assertThrows(IllegalArgumentException.class, () -> new Skip().start(-1));
    }

    @Test
    void gatherFillsItsBufferAndNotOneByteMoreWhereverTheInputIsSplit() {
        for (int split = 0; split <= STREAM.length; split++) {
            ByteBuffer dst = ByteBuffer.allocate(6);
            ByteBuffer first = ByteBuffer.wrap(STREAM, 0, split);
            assertEquals(split >= 6, Gather.into(dst, first), "split at " + split);
            ByteBuffer rest = ByteBuffer.wrap(STREAM, first.position(), STREAM.length - first.position());
            assertTrue(Gather.into(dst, rest), "split at " + split);
            assertArrayEquals(new byte[]{1, 2, 3, 4, 5, 6}, dst.array());
            assertEquals(7, rest.get(), "split at " + split);
        }
        assertFalse(Gather.into(ByteBuffer.allocate(1), ByteBuffer.allocate(0)));
    }
}
