package dev.rbridge.nbd.protocol;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

import org.junit.jupiter.api.Test;

class RequestDecoderTest {
    private static final int MAX_PAYLOAD = 65537;

    /** Hands out buffers bigger than asked (limit set to the length, garbage inside) and remembers each one. */
    private static final class CountingAllocator implements PayloadAllocator {
        final List<ByteBuffer> handedOut = new ArrayList<>();
        final boolean direct;

        CountingAllocator(boolean direct) {
            this.direct = direct;
        }

        @Override
        public ByteBuffer allocate(int length) {
            int capacity = length + 13;
            ByteBuffer b = direct ? ByteBuffer.allocateDirect(capacity) : ByteBuffer.allocate(capacity);
            while (b.hasRemaining()) {
                b.put((byte) 0x5A);
            }
            b.clear().limit(length);
            handedOut.add(b);
            return b;
        }

        List<Integer> lengths() {
            return handedOut.stream().map(ByteBuffer::limit).toList();
        }
    }

    /** A client stream, the requests it must decode to (payload = expected bytes) and the lengths buffered. */
    private record Script(byte[] bytes, int[] ends, List<Request> expected, List<Integer> allocations) {
    }

    private static final class ScriptBuilder {
        final WireBytes wire = new WireBytes();
        final List<Request> expected = new ArrayList<>();
        final List<Integer> allocations = new ArrayList<>();
        final int maxPayload;

        ScriptBuilder(int maxPayload) {
            this.maxPayload = maxPayload;
        }

        ScriptBuilder command(int flags, int type, long handle, long offset, long length) {
            wire.request(flags, type, handle, offset, length, null);
            expected.add(new Request(flags, type, handle, offset, length, null, false));
            return this;
        }

        ScriptBuilder write(int flags, long handle, long offset, byte[] payload) {
            wire.request(flags, Nbd.CMD_WRITE, handle, offset, payload.length, payload);
            boolean discard = payload.length > maxPayload;
            expected.add(new Request(flags, Nbd.CMD_WRITE, handle, offset, payload.length,
                    discard ? null : ByteBuffer.wrap(payload), discard));
            if (!discard && payload.length > 0) {
                allocations.add(payload.length);
            }
            return this;
        }

        Script build() {
            return new Script(wire.toByteArray(), wire.ends(), List.copyOf(expected), List.copyOf(allocations));
        }
    }

    private static byte[] random(Random r, int n) {
        byte[] b = new byte[n];
        r.nextBytes(b);
        return b;
    }

    private static Script longScript() {
        Random r = new Random(1234);
        return new ScriptBuilder(MAX_PAYLOAD)
                .command(0, Nbd.CMD_READ, 1, 0, 4096)
                .write(0, 2, 4096, new byte[0])
                .write(Nbd.CMD_FLAG_FUA, 3, 1, random(r, 1))
                .write(0, 4, 8191, random(r, 4095))
                .write(Nbd.CMD_FLAG_FUA, 5, 1L << 40, random(r, 4096))
                .write(0, 6, 12345, random(r, MAX_PAYLOAD))
                .command(0, Nbd.CMD_FLUSH, 7, 0, 0)
                .command(Nbd.CMD_FLAG_FUA, Nbd.CMD_TRIM, 8, 1L << 40, 1L << 30)
                .command(Nbd.CMD_FLAG_NO_HOLE | Nbd.CMD_FLAG_FAST_ZERO | Nbd.CMD_FLAG_FUA, Nbd.CMD_WRITE_ZEROES, 9,
                        65536, 1 << 20)
                .command(Nbd.CMD_FLAG_REQ_ONE, Nbd.CMD_BLOCK_STATUS, 10, 0, 0xFFFFFFFFL)
                .command(0, Nbd.CMD_CACHE, 11, 4096, 8192)
                .command(0, 99, 12, 0, 17) // unknown type: a length is not a payload
                .command(0, Nbd.CMD_READ, 0x8000_0000_0000_0001L, 0xFFFF_FFFF_FFFF_F000L, 4096)
                .command(0, Nbd.CMD_READ, -1L, -1L, 1)
                .command(Nbd.CMD_FLAG_DF, Nbd.CMD_READ, 0xDEAD_BEEF_CAFE_BABEL, 0x7FFF_FFFF_FFFF_FFFFL, 0xFFFFFFFFL)
                .write(0, 13, 0, random(r, MAX_PAYLOAD + 1)) // over the limit: skipped
                .command(0, Nbd.CMD_READ, 14, 512, 512) // framing survived the skip
                .write(0, 15, 0, random(r, 3))
                .command(0xFFFF, Nbd.CMD_READ, 16, 0, 0)
                .command(0, 0xFFFF, 17, 0, 0)
                .command(0, Nbd.CMD_DISC, 18, 0, 0)
                .build();
    }

    /** Small enough to split at every position; maxPayload 8 so a 9-byte WRITE is skipped. */
    private static Script shortScript() {
        Random r = new Random(99);
        return new ScriptBuilder(8)
                .write(0, 1, 0, random(r, 8))
                .command(0, Nbd.CMD_READ, 2, 4096, 0xFFFFFFFFL)
                .write(Nbd.CMD_FLAG_FUA, 3, 7, random(r, 9))
                .write(0, 4, 0, new byte[0])
                .command(0, Nbd.CMD_TRIM, 0x8000_0000_0000_0000L, 0xFFFF_FFFF_FFFF_FFFFL, 1)
                .write(0, 5, 0, random(r, 1))
                .write(0, 6, 0, random(r, 100))
                .command(0, 99, 7, 0, 5)
                .command(0, Nbd.CMD_DISC, 8, 0, 0)
                .build();
    }

    private static void assertRequest(Request e, Request a, String how) {
        assertNotNull(a, how);
        assertEquals(e.type(), a.type(), how + ": type");
        assertEquals(e.flags(), a.flags(), how + ": flags");
        assertEquals(e.handle(), a.handle(), how + ": handle");
        assertEquals(e.offset(), a.offset(), how + ": offset");
        assertEquals(e.length(), a.length(), how + ": length");
        assertEquals(e.payloadDiscarded(), a.payloadDiscarded(), how + ": payloadDiscarded");
        if (e.payload() == null) {
            assertNull(a.payload(), how + ": payload");
            return;
        }
        ByteBuffer p = a.payload();
        assertNotNull(p, how + ": payload");
        assertEquals(0, p.position(), how + ": payload position");
        assertEquals(e.payload().remaining(), p.limit(), how + ": payload limit");
        assertEquals(-1, e.payload().duplicate().mismatch(p.duplicate()), how + ": payload bytes differ at this index");
    }

    private static void assertRequests(List<Request> expected, List<Request> actual, String how) {
        assertEquals(expected.size(), actual.size(), how + ": count");
        for (int i = 0; i < expected.size(); i++) {
            assertRequest(expected.get(i), actual.get(i), how + ", request #" + i + " " + expected.get(i));
        }
    }

    private static void decodeAndCheck(Script s, int maxPayload, int[] cuts, boolean direct, String how)
            throws NbdProtocolException {
        CountingAllocator allocator = new CountingAllocator(direct);
        RequestDecoder decoder = new RequestDecoder(allocator, maxPayload);
        List<Request> got = WireBytes.feed(decoder::next, s.bytes(), cuts, s.ends(), direct);
        assertRequests(s.expected(), got, how);
        assertEquals(s.allocations(), allocator.lengths(), how + ": one allocation per buffered WRITE, none otherwise");
        // the payload is the allocator's buffer itself, so the server can give it back to its pool
        int k = 0;
        for (Request r : got) {
            if (r.type() == Nbd.CMD_WRITE && r.length() > 0 && !r.payloadDiscarded()) {
                assertSame(allocator.handedOut.get(k++), r.payload(), how + ": payload buffer of " + r);
            }
        }
        assertTrue(decoder.atBoundary(), how + ": at a boundary after the last request");
    }

    @Test
    void longStreamDecodesTheSameHoweverItIsSplit() throws Exception {
        Script s = longScript();
        int n = s.bytes().length;
        assertEquals(21, s.expected().size());
        decodeAndCheck(s, MAX_PAYLOAD, WireBytes.whole(n), false, "one buffer");
        decodeAndCheck(s, MAX_PAYLOAD, WireBytes.whole(n), true, "one direct buffer");
        decodeAndCheck(s, MAX_PAYLOAD, WireBytes.byteByByte(n), false, "one byte at a time");
        Random random = new Random(7);
        for (int i = 0; i < 30; i++) {
            int p = random.nextInt(n + 1);
            decodeAndCheck(s, MAX_PAYLOAD, WireBytes.splitAt(p, n), i % 2 == 1, "split at " + p);
        }
        for (int end : s.ends()) {
            for (int p = Math.max(0, end - 29); p <= Math.min(n, end + 29); p++) {
                decodeAndCheck(s, MAX_PAYLOAD, WireBytes.splitAt(p, n), false, "split at " + p);
            }
        }
        for (long seed = 1; seed <= 8; seed++) {
            decodeAndCheck(s, MAX_PAYLOAD, WireBytes.randomChunks(n, seed), seed % 2 == 0,
                    "random chunks, seed " + seed);
        }
    }

    @Test
    void shortStreamDecodesTheSameWhereverItIsSplit() throws Exception {
        Script s = shortScript();
        int n = s.bytes().length;
        decodeAndCheck(s, 8, WireBytes.whole(n), false, "one buffer");
        decodeAndCheck(s, 8, WireBytes.byteByByte(n), true, "one byte at a time");
        for (int p = 0; p <= n; p++) {
            decodeAndCheck(s, 8, WireBytes.splitAt(p, n), p % 2 == 0, "split at " + p);
        }
        for (long seed = 1; seed <= 20; seed++) {
            decodeAndCheck(s, 8, WireBytes.randomChunks(n, seed), false, "random chunks, seed " + seed);
        }
    }

    @Test
    void oversizeWriteIsDiscardedAndTheNextRequestDecodes() throws Exception {
        byte[] big = new byte[1000];
        Arrays.fill(big, (byte) 0x25); // looks like the start of a request magic, must still be skipped
        WireBytes w = new WireBytes()
                .request(Nbd.CMD_FLAG_FUA, Nbd.CMD_WRITE, 41, 8192, big.length, big)
                .request(0, Nbd.CMD_READ, 42, 0, 4096, null);
        for (int[] cuts : List.of(WireBytes.whole(w.size()), WireBytes.byteByByte(w.size()))) {
            CountingAllocator allocator = new CountingAllocator(false);
            RequestDecoder d = new RequestDecoder(allocator, 999);
            List<Request> got = WireBytes.feed(d::next, w.toByteArray(), cuts, w.ends(), false);
            Request write = got.get(0);
            assertEquals(Nbd.CMD_WRITE, write.type());
            assertEquals(1000, write.length());
            assertEquals(41, write.handle());
            assertNull(write.payload());
            assertTrue(write.payloadDiscarded());
            assertTrue(write.hasFlag(Nbd.CMD_FLAG_FUA));
            assertEquals(42, got.get(1).handle());
            assertEquals(Nbd.CMD_READ, got.get(1).type());
            assertFalse(got.get(1).payloadDiscarded());
            assertEquals(List.of(), allocator.lengths(), "nothing allocated for a discarded payload");
        }
    }

    @Test
    void maximumLengthWriteIsDiscardedWithoutOverflow() throws Exception {
        CountingAllocator allocator = new CountingAllocator(false);
        RequestDecoder d = new RequestDecoder(allocator, 1 << 20);
        ByteBuffer head =
                ByteBuffer.wrap(new WireBytes().request(0, Nbd.CMD_WRITE, 5, 0, 0xFFFFFFFFL, null).toByteArray());
        assertNull(d.next(head));
        assertFalse(head.hasRemaining());
        assertFalse(d.atBoundary());
        assertNull(d.payloadSink(), "no sink while discarding");
        ByteBuffer chunk = ByteBuffer.allocate(16 << 20).asReadOnlyBuffer();
        long left = 0xFFFFFFFFL;
        Request r = null;
        while (left > 0) {
            int n = (int) Math.min(left, chunk.capacity());
            chunk.clear().limit(n);
            r = d.next(chunk);
            assertFalse(chunk.hasRemaining());
            left -= n;
            if (left > 0) {
                assertNull(r, "returned with " + left + " payload bytes still to skip");
            }
        }
        assertNotNull(r);
        assertEquals(4294967295L, r.length());
        assertTrue(r.payloadDiscarded());
        assertNull(r.payload());
        assertTrue(d.atBoundary());
        ByteBuffer next = ByteBuffer.wrap(new WireBytes().request(0, Nbd.CMD_FLUSH, 6, 0, 0, null).toByteArray());
        Request flush = d.next(next);
        assertEquals(Nbd.CMD_FLUSH, flush.type());
        assertEquals(6, flush.handle());
        assertEquals(List.of(), allocator.lengths());
    }

    @Test
    void payloadSinkCanBeFilledDirectly() throws Exception {
        byte[] payload = new byte[10];
        new Random(3).nextBytes(payload);
        CountingAllocator allocator = new CountingAllocator(true);
        RequestDecoder d = new RequestDecoder(allocator, 1 << 20);
        assertTrue(d.atBoundary());
        assertNull(d.payloadSink());

        byte[] head = new WireBytes().request(0, Nbd.CMD_WRITE, 77, 4096, 10, null).toByteArray();
        ByteBuffer in = ByteBuffer.allocate(28 + 3).put(head).put(payload, 0, 3).flip();
        assertNull(d.next(in.slice(0, 1)));
        assertFalse(d.atBoundary(), "one header byte in");
        assertNull(d.payloadSink(), "no sink before the header is complete");
        assertNull(d.next(in.position(1)));
        assertFalse(in.hasRemaining());
        assertFalse(d.atBoundary());

        ByteBuffer sink = d.payloadSink();
        assertNotNull(sink);
        assertSame(allocator.handedOut.getFirst(), sink);
        assertEquals(3, sink.position(), "the 3 payload bytes that came with the header");
        assertEquals(7, sink.remaining());
        sink.put(payload, 3, 4);
        assertNull(d.next(ByteBuffer.allocate(0)), "still 3 bytes missing");
        assertSame(sink, d.payloadSink());
        sink.put(payload, 7, 3);

        Request r = d.next(ByteBuffer.allocate(0));
        assertNotNull(r, "the sink is full: the request is complete without more input");
        assertEquals(77, r.handle());
        assertEquals(ByteBuffer.wrap(payload), r.payload());
        assertTrue(d.atBoundary());
        assertNull(d.payloadSink());
        assertEquals(List.of(10), allocator.lengths());
    }

    @Test
    void aRefusedPayloadBufferLeavesTheInputAloneUntilTheAllocatorGivesOne() throws Exception {
        byte[] payload = new byte[10];
        new Random(5).nextBytes(payload);
        byte[] stream = new WireBytes()
                .request(0, Nbd.CMD_WRITE, 1, 0, 10, payload)
                .request(0, Nbd.CMD_READ, 2, 0, 512, null)
                .toByteArray();
        CountingAllocator real = new CountingAllocator(false);
        boolean[] give = {false};
        int[] asked = {0};
        RequestDecoder d = new RequestDecoder(length -> {
            asked[0]++;
            return give[0] ? real.allocate(length) : null;
        }, 1 << 20);
        // one byte at a time, as it might arrive
        ByteBuffer in = ByteBuffer.allocate(stream.length);
        int fed = 0;
        while (!d.awaitingBuffer()) {
            assertNull(d.next(in.put(stream[fed++]).flip()));
            in.compact();
        }
        assertEquals(28, fed, "the whole header and nothing more");
        in.put(stream, fed, stream.length - fed).flip();
        int before = in.remaining();
        for (int i = 0; i < 3; i++) {
            assertNull(d.next(in), "no buffer: no request");
            assertTrue(d.awaitingBuffer());
            assertEquals(before, in.remaining(), "nothing consumed while waiting for a buffer");
            assertFalse(d.atBoundary());
        }
        assertEquals(4, asked[0], "asked again on every call");
        give[0] = true;
        Request w = d.next(in);
        assertNotNull(w);
        assertEquals(1, w.handle());
        assertEquals(ByteBuffer.wrap(payload), w.payload());
        assertFalse(d.awaitingBuffer());
        Request r = d.next(in);
        assertEquals(2, r.handle());
        assertFalse(in.hasRemaining());
        assertTrue(d.atBoundary());
    }

    @Test
    void payloadSinkPartlyFilledThenTheRestFromInput() throws Exception {
        byte[] payload = new byte[6];
        new Random(4).nextBytes(payload);
        RequestDecoder d = new RequestDecoder(new CountingAllocator(false), 1 << 20);
        assertNull(d.next(ByteBuffer.wrap(new WireBytes().request(0, Nbd.CMD_WRITE, 1, 0, 6, null).toByteArray())));
        d.payloadSink().put(payload, 0, 2);
        WireBytes rest =
                new WireBytes().bytes(Arrays.copyOfRange(payload, 2, 6)).request(0, Nbd.CMD_READ, 2, 0, 1, null);
        ByteBuffer in = ByteBuffer.wrap(rest.toByteArray());
        Request write = d.next(in);
        assertEquals(ByteBuffer.wrap(payload), write.payload());
        assertEquals(4, in.position(), "only the rest of the payload is consumed");
        Request read = d.next(in);
        assertEquals(Nbd.CMD_READ, read.type());
        assertEquals(2, read.handle());
        assertFalse(in.hasRemaining());
    }

    @Test
    void atBoundaryOnlyBetweenRequests() throws Exception {
        byte[] stream = new WireBytes()
                .request(0, Nbd.CMD_READ, 1, 0, 512, null)
                .request(0, Nbd.CMD_WRITE, 2, 0, 5, new byte[]{1, 2, 3, 4, 5})
                .request(0, Nbd.CMD_WRITE, 3, 0, 50, new byte[50]) // discarded with maxPayload 8
                .toByteArray();
        RequestDecoder d = new RequestDecoder(new CountingAllocator(false), 8);
        assertTrue(d.atBoundary());
        int complete = 0;
        for (int i = 0; i < stream.length; i++) {
            Request r = d.next(ByteBuffer.wrap(stream, i, 1));
            if (r != null) {
                complete++;
                assertTrue(d.atBoundary(), "after request " + complete);
            } else {
                assertFalse(d.atBoundary(), "in the middle of a request at byte " + i);
                // from the byte completing WRITE 2's header until its last payload byte
                boolean inPayloadOf2 = i >= 28 + 27 && i < 28 + 28 + 4;
                assertEquals(inPayloadOf2, d.payloadSink() != null, "payloadSink at byte " + i);
            }
        }
        assertEquals(3, complete);
        assertTrue(d.atBoundary());
    }

    @Test
    void badMagicIsAProtocolError() throws Exception {
        byte[] good = new WireBytes().request(0, Nbd.CMD_READ, 1, 0, 512, null).toByteArray();
        byte[] bad = good.clone();
        bad[3] ^= 1; // 0x25609512
        RequestDecoder d = new RequestDecoder(PayloadAllocator.HEAP, 1 << 20);
        ByteBuffer in = ByteBuffer.allocate(56).put(good).put(bad).flip();
        assertEquals(1, d.next(in).handle());
        NbdProtocolException e = assertThrows(NbdProtocolException.class, () -> d.next(in));
        assertTrue(e.getMessage().toLowerCase().contains("25609512"), e.getMessage());

        // the simple reply magic is not a request magic either; detected once the header is complete
        byte[] reply = good.clone();
        ByteBuffer.wrap(reply).putInt(0, Nbd.SIMPLE_REPLY_MAGIC);
        RequestDecoder d2 = new RequestDecoder(PayloadAllocator.HEAP, 1 << 20);
        for (int i = 0; i < 27; i++) {
            assertNull(d2.next(ByteBuffer.wrap(reply, i, 1)));
        }
        assertThrows(NbdProtocolException.class, () -> d2.next(ByteBuffer.wrap(reply, 27, 1)));
    }

    @Test
    void nonWriteLengthIsUnsignedAndCarriesNoPayload() throws Exception {
        WireBytes w = new WireBytes().request(0, Nbd.CMD_READ, 1, 0, 0xFFFFFFFFL, null)
                .request(0, Nbd.CMD_TRIM, 2, 0, 0x80000000L, null);
        RequestDecoder d = new RequestDecoder(PayloadAllocator.HEAP, 1 << 20);
        ByteBuffer in = ByteBuffer.wrap(w.toByteArray());
        Request read = d.next(in);
        assertEquals(4294967295L, read.length());
        assertNull(read.payload());
        assertEquals(28, in.position());
        assertEquals(2147483648L, d.next(in).length());
    }
}
