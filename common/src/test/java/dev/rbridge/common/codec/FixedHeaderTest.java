package dev.rbridge.common.codec;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

class FixedHeaderTest {
    /** Two 12-byte headers (an int and a long each), then 3 bytes of what follows them. */
    private static ByteBuffer twoHeaders(ByteOrder order) {
        return ByteBuffer.allocate(27).order(order).putInt(1).putLong(2).putInt(3).putLong(4).put(new byte[]{5, 6, 7})
                .flip();
    }

    @Test
    void aWholeHeaderIsReadWhereItLies() {
        FixedHeader header = new FixedHeader(12, ByteOrder.LITTLE_ENDIAN);
        ByteBuffer in = twoHeaders(ByteOrder.LITTLE_ENDIAN);
        ByteBuffer h = header.next(in);
        assertSame(in, h);
        assertEquals(1, h.getInt());
        assertEquals(2, h.getLong());
        assertSame(in, header.next(in));
        assertEquals(3, in.getInt());
        assertEquals(4, in.getLong());
        assertNull(header.next(in), "3 bytes are no header");
        assertTrue(header.partial());
        assertFalse(in.hasRemaining());
    }

    @Test
    void aHeaderSplitAnywhereIsGathered() {
        for (int cut = 0; cut <= 24; cut++) {
            FixedHeader header = new FixedHeader(12, ByteOrder.BIG_ENDIAN);
            ByteBuffer in = twoHeaders(ByteOrder.BIG_ENDIAN);
            long[] read = new long[4];
            int headers = 0;
            for (int limit : new int[]{cut, 24}) {
                in.limit(limit);
                for (ByteBuffer h = header.next(in); h != null; h = header.next(in)) {
                    read[2 * headers] = h.getInt();
                    read[2 * headers + 1] = h.getLong();
                    headers++;
                }
                assertFalse(in.hasRemaining(), "cut at " + cut + ": input left unread");
                assertEquals(limit % 12 != 0, header.partial(), "cut at " + cut);
            }
            assertEquals(2, headers, "cut at " + cut);
            assertEquals(1, read[0]);
            assertEquals(2, read[1]);
            assertEquals(3, read[2]);
            assertEquals(4, read[3]);
            assertEquals(24, in.position(), "nothing after the headers is consumed");
        }
    }

    @Test
    void inputOfAnotherByteOrderIsGatheredInTheHeadersOrder() {
        FixedHeader header = new FixedHeader(12, ByteOrder.BIG_ENDIAN);
        ByteBuffer in = twoHeaders(ByteOrder.BIG_ENDIAN).order(ByteOrder.LITTLE_ENDIAN);
        ByteBuffer h = header.next(in);
        assertEquals(ByteOrder.BIG_ENDIAN, h.order());
        assertEquals(1, h.getInt());
        assertEquals(2, h.getLong());
        assertEquals(12, in.position(), "the header is consumed as it is gathered");
    }
}
