package dev.rbridge.rdma.wire;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ReadOnlyBufferException;
import java.util.HexFormat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A message's byte field: a copy that later changes to its source do not reach, read-only views that move on their
 * own, equal by content, and shown by its length only.
 */
class WireBytesTest {
    private static final byte[] SECRET = HexFormat.of().parseHex("a1b2c3d4e5f60718");

    @Test
    void aCopyOfABufferTakesItsRemainingBytesAndLeavesItAlone() {
        ByteBuffer source = ByteBuffer.allocate(12).put(new byte[4]).put(SECRET);
        source.position(4);
        WireBytes w = WireBytes.copyOf(source);
        assertEquals(4, source.position(), "the source's position is left where it was");
        source.put(4, (byte) 0).put(11, (byte) 0);
        assertEquals(SECRET.length, w.length());
        assertArrayEquals(SECRET, w.toArray(), "changing the source after the copy changes nothing");
    }

    @Test
    void aCopyOfAnArrayIsIsolatedFromIt() {
        byte[] source = SECRET.clone();
        WireBytes w = WireBytes.of(source);
        source[0] ^= 1;
        assertArrayEquals(SECRET, w.toArray());
        w.toArray()[1] ^= 1;
        assertArrayEquals(SECRET, w.toArray(), "the array handed out is a copy too");
    }

    @Test
    void theViewIsReadOnlyAndEachViewMovesOnItsOwn() {
        WireBytes w = WireBytes.of(SECRET);
        ByteBuffer first = w.buffer();
        assertTrue(first.isReadOnly());
        assertThrows(ReadOnlyBufferException.class, () -> first.put(0, (byte) 0));
        assertEquals(SECRET[0], first.get());
        ByteBuffer second = w.buffer();
        assertEquals(0, second.position(), "reading one view moves no other");
        assertEquals(SECRET.length, second.remaining());
        byte[] read = new byte[SECRET.length];
        second.get(read);
        assertArrayEquals(SECRET, read);
    }

    @Test
    void theEncoderPutsTheBytesAfterTheirLength() {
        ByteBuffer dst = ByteBuffer.allocate(4 + SECRET.length).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        MessageEncoder.putBytes(dst, WireBytes.of(SECRET));
        assertFalse(dst.hasRemaining());
        assertEquals(SECRET.length, dst.getInt(0));
        assertEquals(ByteBuffer.wrap(SECRET), dst.slice(4, SECRET.length));
    }

    @Test
    void equalityIsByContent() {
        WireBytes a = WireBytes.of(SECRET);
        WireBytes b = WireBytes.copyOf(ByteBuffer.wrap(SECRET.clone()));
        assertEquals(a, b);
        assertEquals(a.hashCode(), b.hashCode());
        byte[] other = SECRET.clone();
        other[7] ^= 1;
        assertNotEquals(a, WireBytes.of(other));
        assertNotEquals(a, WireBytes.EMPTY);
        assertEquals(WireBytes.EMPTY, WireBytes.of(new byte[0]));
        assertTrue(WireBytes.EMPTY.isEmpty());
        assertFalse(a.isEmpty());
    }

    @Test
    void itIsShownByItsLengthNeverItsBytes() {
        WireBytes w = WireBytes.of(SECRET);
        assertEquals("WireBytes[length=8]", w.toString());
        assertEquals("MapReply[id=1, address=2, length=3, remoteKey=WireBytes[length=8]]",
                new Message.MapReply(1, 2, 3, w).toString(), "a message shows no byte of it");
    }
}
