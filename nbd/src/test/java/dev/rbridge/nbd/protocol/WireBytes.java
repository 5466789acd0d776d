package dev.rbridge.nbd.protocol;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.stream.IntStream;

/**
 * Builds what a client sends (big-endian, as on the wire) and remembers where each message ends, then feeds the
 * bytes to a decoder split in various ways while checking that every returned message leaves the input positioned
 * exactly at its end.
 */
final class WireBytes {
    private final ByteArrayOutputStream out = new ByteArrayOutputStream();
    private final List<Integer> ends = new ArrayList<>();

    // ---- raw fields

    WireBytes u8(int v) {
        out.write(v);
        return this;
    }

    WireBytes u16(int v) {
        return u8(v >>> 8).u8(v);
    }

    WireBytes u32(long v) {
        return u16((int) (v >>> 16)).u16((int) v);
    }

    WireBytes u64(long v) {
        return u32(v >>> 32).u32(v);
    }

    WireBytes bytes(byte[] b) {
        out.writeBytes(b);
        return this;
    }

    /** Records the current length as the end of one message. */
    WireBytes mark() {
        ends.add(out.size());
        return this;
    }

    int size() {
        return out.size();
    }

    byte[] toByteArray() {
        return out.toByteArray();
    }

    /** End offset of every message, in order. */
    int[] ends() {
        return ends.stream().mapToInt(Integer::intValue).toArray();
    }

    // ---- handshake

    WireBytes clientFlags(int flags) {
        return u32(flags).mark();
    }

    /** IHAVEOPT, option, data length, data: one whole option. */
    WireBytes option(int option, byte[] data) {
        return u64(Nbd.OPTS_MAGIC).u32(option).u32(data.length).bytes(data).mark();
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** Data of NBD_OPT_INFO / NBD_OPT_GO: u32 name length, name, u16 count, u16 requests. */
    static byte[] infoData(byte[] name, int... requests) {
        WireBytes w = new WireBytes().u32(name.length).bytes(name).u16(requests.length);
        for (int r : requests) {
            w.u16(r);
        }
        return w.toByteArray();
    }

    /** Data of NBD_OPT_{LIST,SET}_META_CONTEXT: u32 name length, name, u32 count, (u32 length, query)*. */
    static byte[] metaData(byte[] name, byte[]... queries) {
        WireBytes w = new WireBytes().u32(name.length).bytes(name).u32(queries.length);
        for (byte[] q : queries) {
            w.u32(q.length).bytes(q);
        }
        return w.toByteArray();
    }

    // ---- transmission

    /** A request header followed by {@code payload} (may be null): what is sent, whatever length claims. */
    WireBytes request(int flags, int type, long handle, long offset, long length, byte[] payload) {
        u32(Nbd.REQUEST_MAGIC).u16(flags).u16(type).u64(handle).u64(offset).u32(length);
        if (payload != null) {
            bytes(payload);
        }
        return mark();
    }

    // ---- feeding

    @FunctionalInterface
    interface Decoder<T> {
        T next(ByteBuffer in) throws NbdProtocolException;
    }

    /** How the stream is cut: the end offset of every chunk, ascending, the last one the stream length. */
    static int[] whole(int length) {
        return new int[]{length};
    }

    static int[] byteByByte(int length) {
        return IntStream.rangeClosed(1, length).toArray();
    }

    static int[] splitAt(int position, int length) {
        return position == 0 || position == length ? whole(length) : new int[]{position, length};
    }

    /** Chunks of random sizes, mostly small, sometimes large. */
    static int[] randomChunks(int length, long seed) {
        Random random = new Random(seed);
        List<Integer> cuts = new ArrayList<>();
        int pos = 0;
        while (pos < length) {
            int pick = random.nextInt(10);
            int size =
                    pick < 5 ? 1 + random.nextInt(16) : pick < 8 ? 1 + random.nextInt(600) : 1 + random.nextInt(80_000);
            pos = Math.min(length, pos + size);
            cuts.add(pos);
        }
        return cuts.stream().mapToInt(Integer::intValue).toArray();
    }

    /**
     * Feeds {@code stream} to {@code decoder} in chunks ending at {@code cuts}, calling {@code next} until it returns
     * null for each chunk. Each chunk sits inside a larger buffer with garbage before its position and after its
     * limit (so absolute indexing bugs show), read-only, heap or direct. Asserts that after every message the input
     * position is exactly at that message's end in {@code ends}, that null is returned only with the input drained,
     * and that an empty buffer between chunks changes nothing.
     */
    static <T> List<T> feed(Decoder<T> decoder, byte[] stream, int[] cuts, int[] ends, boolean direct)
            throws NbdProtocolException {
        List<T> messages = new ArrayList<>();
        ByteBuffer empty = ByteBuffer.allocate(0);
        int from = 0;
        for (int to : cuts) {
            int length = to - from;
            int pad = 7;
            ByteBuffer raw =
                    direct ? ByteBuffer.allocateDirect(length + 2 * pad) : ByteBuffer.allocate(length + 2 * pad);
            byte[] garbage = new byte[pad];
            Arrays.fill(garbage, (byte) 0xA5);
            raw.put(garbage).put(stream, from, length).put(garbage);
            ByteBuffer in = raw.position(pad).limit(pad + length).asReadOnlyBuffer();
            while (true) {
                T m = decoder.next(in);
                assertEquals(pad + length, in.limit(), "the decoder must not move the input limit");
                if (m == null) {
                    assertFalse(in.hasRemaining(),
                            "null returned with " + in.remaining() + " bytes of input left (chunk "
                                    + from + ".." + to + ")");
                    break;
                }
                int at = from + in.position() - pad;
                assertTrue(messages.size() < ends.length, "more messages than expected; extra: " + m);
                assertEquals(ends[messages.size()], at, "input position after message #" + messages.size() + " " + m);
                messages.add(m);
            }
            assertNull(decoder.next(empty), "an empty buffer must yield nothing");
            from = to;
        }
        assertEquals(stream.length, from, "cuts must cover the stream");
        assertEquals(ends.length, messages.size(), "number of messages decoded");
        return messages;
    }
}
