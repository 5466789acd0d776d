package dev.rbridge.cli.history;

import dev.rbridge.cli.history.BlockVersion.Content;
import org.junit.jupiter.api.Test;

import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

class BlockVersionTest {
    @Test
    void aVersionDecodesAsItselfForItsBlockAtEveryMultipleOf4096() {
        for (int length : new int[]{4096, 8192, 65536}) {
            BlockVersion v = new BlockVersion(3, 1_234_567_890_123L);
            byte[] bytes = v.encode(77, length);
            assertEquals(new Content.Written(v, 77), BlockVersion.decode(bytes), "length " + length);
        }
    }

    @Test
    void allZerosIsTheInitialContentAndNothingElseIs() {
        assertEquals(BlockVersion.INITIAL, BlockVersion.decode(new byte[4096]));
        byte[] almost = new byte[4096];
        almost[4095] = 1;
        Content c = BlockVersion.decode(almost);
        assertEquals(4095, assertInstanceOf(Content.Corrupt.class, c).offset(), c.toString());
    }

    @Test
    void aTornBlockIsCorruptWhereTheOlderHalfBegins() {
        byte[] newer = new BlockVersion(1, 8).encode(5, 4096);
        byte[] older = new BlockVersion(1, 7).encode(5, 4096);
        byte[] torn = newer.clone();
        System.arraycopy(older, 2048, torn, 2048, 2048);
        Content c = BlockVersion.decode(torn);
        assertEquals(2048, assertInstanceOf(Content.Corrupt.class, c).offset(), c.toString());

        byte[] tornTheOtherWay = older.clone();
        System.arraycopy(newer, 2048, tornTheOtherWay, 2048, 2048);
        assertInstanceOf(Content.Corrupt.class, BlockVersion.decode(tornTheOtherWay));
    }

    @Test
    void aBlockZeroedInPartIsCorrupt() {
        byte[] bytes = new BlockVersion(2, 1).encode(0, 8192);
        java.util.Arrays.fill(bytes, 4096, 8192, (byte) 0);
        Content c = BlockVersion.decode(bytes);
        assertEquals(4096, assertInstanceOf(Content.Corrupt.class, c).offset(), c.toString());
    }

    @Test
    void everySingleBitFlipIsCorrupt() {
        byte[] good = new BlockVersion(9, 42).encode(11, 4096);
        for (int bit = 0; bit < 4096 * 8; bit++) {
            byte[] bad = good.clone();
            bad[bit / 8] ^= (byte) (1 << (bit % 8));
            Content c = BlockVersion.decode(bad);
            assertInstanceOf(Content.Corrupt.class, c, "bit " + bit + " flipped decoded as " + c);
        }
    }

    @Test
    void aVersionReadElsewhereNamesItsOwnBlockAndRandomBytesAreCorrupt() {
        BlockVersion v = new BlockVersion(1, 1);
        Content moved = BlockVersion.decode(v.encode(12, 4096));
        assertEquals(12, assertInstanceOf(Content.Written.class, moved).block());

        byte[] garbage = new byte[4096];
        new Random(1).nextBytes(garbage);
        assertEquals(0, assertInstanceOf(Content.Corrupt.class, BlockVersion.decode(garbage)).offset());
    }

    @Test
    void versionsOfOneBlockShareNoBodyWord() {
        byte[] a = new BlockVersion(1, 1).encode(3, 4096);
        byte[] b = new BlockVersion(1, 2).encode(3, 4096);
        byte[] c = new BlockVersion(2, 1).encode(3, 4096);
        for (int at = BlockVersion.HEADER_BYTES; at < 4096; at += 8) {
            long wa = java.nio.ByteBuffer.wrap(a).getLong(at);
            assertNotEquals(wa, java.nio.ByteBuffer.wrap(b).getLong(at), "word at " + at);
            assertNotEquals(wa, java.nio.ByteBuffer.wrap(c).getLong(at), "word at " + at);
        }
    }

    @Test
    void aLengthThatIsNotAMultipleOf4096IsRefused() {
        assertThrows(IllegalArgumentException.class, () -> new BlockVersion(1, 1).encode(0, 512));
        assertThrows(IllegalArgumentException.class, () -> BlockVersion.decode(new byte[4097]));
    }
}
