package dev.rbridge.nbd.protocol;

import static dev.rbridge.fuzz.Feeds.check;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

import org.junit.jupiter.api.Tag;

import com.code_intelligence.jazzer.api.FuzzedDataProvider;
import com.code_intelligence.jazzer.junit.FuzzTest;

import dev.rbridge.fuzz.Feeds;

/**
 * The transmission-phase request decoder against any bytes a client can send: typed requests or
 * {@link NbdProtocolException}, nothing else; every request re-encodes to exactly the bytes it consumed; a WRITE
 * payload is the bytes that followed its header, never more than sent nor more than the limit (beyond it discarded);
 * the same requests whether the input arrives whole, cut in two, or a byte at a time, while the allocator refuses
 * every other buffer. Parameters (4 bytes each from the end, see {@link Feeds}): cut position, payload limit.
 */
@Tag("fuzz")
class RequestDecoderFuzzTest {
    /** One decoded request with its WRITE payload copied out, comparable across feeding modes. */
    private record Decoded(Request request, byte[] payload) {
        boolean sameAs(Decoded o) {
            Request a = request;
            Request b = o.request;
            return a.flags() == b.flags() && a.type() == b.type() && a.handle() == b.handle()
                    && a.offset() == b.offset() && a.length() == b.length()
                    && a.payloadDiscarded() == b.payloadDiscarded() && Arrays.equals(payload, o.payload);
        }
    }

    /** What one feeding mode produced: the requests, then the protocol error that ended the stream, if any. */
    private record Outcome(List<Decoded> requests, String error) {
    }

    @FuzzTest(maxDuration = "10s")
    void decode(FuzzedDataProvider data) {
        int cut = data.consumeInt();
        int maxPayload = Math.floorMod(data.consumeInt(), 1 << 16);
        byte[] stream = data.consumeRemainingAsBytes();
        Outcome first = null;
        for (int mode = 0; mode < Feeds.modes(stream.length); mode++) {
            Outcome o = run(stream, Feeds.limits(mode, stream.length, cut), maxPayload, mode == 1);
            if (first == null) {
                first = o;
            } else if (!same(first, o)) {
                throw new AssertionError("feeding mode " + mode + " decoded " + o + ", whole input " + first);
            }
        }
    }

    private static Outcome run(byte[] stream, int[] limits, int maxPayload, boolean useSink) {
        int[] calls = {0};
        // Refuses every other request for a buffer, as a full payload budget does.
        PayloadAllocator allocator = n -> (calls[0]++ & 1) == 0 ? null : ByteBuffer.allocate(n);
        RequestDecoder decoder = new RequestDecoder(allocator, maxPayload);
        ByteBuffer in = ByteBuffer.wrap(stream);
        List<Decoded> out = new ArrayList<>();
        int messageStart = 0;
        for (int limit : limits) {
            in.limit(limit);
            while (true) {
                Request r;
                try {
                    r = decoder.next(in);
                } catch (NbdProtocolException e) {
                    check(e.getMessage() != null && !e.getMessage().isEmpty(), "a protocol error without a message");
                    int took = in.position() - messageStart;
                    check(took == Nbd.REQUEST_HEADER_LENGTH,
                            () -> "a bad magic after " + took + " bytes of the header");
                    return new Outcome(out, e.getMessage());
                }
                if (r == null) {
                    if (decoder.awaitingBuffer()) {
                        continue; // the allocator says yes on the next call
                    }
                    ByteBuffer sink = decoder.payloadSink();
                    if (useSink && sink != null && in.hasRemaining()) {
                        // The server fills the sink straight from the socket; those bytes count as consumed.
                        int n = Math.min(sink.remaining(), in.remaining());
                        sink.put(sink.position(), in, in.position(), n).position(sink.position() + n);
                        in.position(in.position() + n);
                        continue;
                    }
                    check(!in.hasRemaining(), () -> "the decoder stopped with " + in.remaining() + " bytes unread");
                    break;
                }
                out.add(checked(r, stream, messageStart, in.position(), maxPayload));
                messageStart = in.position();
                check(decoder.atBoundary(), "not at a boundary after a request");
            }
        }
        check(decoder.atBoundary() == (messageStart == stream.length), "atBoundary disagrees with the bytes left");
        return new Outcome(out, null);
    }

    /** The invariants of one request decoded from {@code stream[start, end)}. */
    private static Decoded checked(Request r, byte[] stream, int start, int end, int maxPayload) {
        check(r.length() >= 0 && r.length() <= 0xFFFFFFFFL, () -> "length " + r.length() + " is not a u32");
        boolean write = r.type() == Nbd.CMD_WRITE;
        long wireLength = Nbd.REQUEST_HEADER_LENGTH + (write ? r.length() : 0);
        check(end - start == wireLength, () -> r + " took " + (end - start) + " bytes, its encoding " + wireLength);
        ByteBuffer header = ByteBuffer.allocate(Nbd.REQUEST_HEADER_LENGTH).putInt(Nbd.REQUEST_MAGIC)
                .putShort((short) r.flags()).putShort((short) r.type()).putLong(r.handle()).putLong(r.offset())
                .putInt((int) r.length());
        check(Arrays.equals(header.array(), 0, header.capacity(), stream, start, start + header.capacity()),
                () -> r + " re-encodes to another header than the one it came from");
        byte[] payload = null;
        if (!write) {
            check(r.payload() == null && !r.payloadDiscarded(), () -> r + " carries a payload");
        } else if (r.length() > maxPayload) {
            check(r.payloadDiscarded() && r.payload() == null,
                    () -> r + " above the limit " + maxPayload + " was kept");
        } else {
            check(!r.payloadDiscarded() && r.payload() != null, () -> r + " within the limit lost its payload");
            ByteBuffer p = r.payload();
            check(p.position() == 0 && p.remaining() == r.length(),
                    () -> r + " payload has " + p.remaining() + " bytes");
            payload = new byte[p.remaining()];
            p.get(0, payload);
            int at = start + Nbd.REQUEST_HEADER_LENGTH;
            check(Arrays.equals(payload, 0, payload.length, stream, at, at + payload.length),
                    () -> r + " payload differs from the bytes sent");
        }
        return new Decoded(r, payload);
    }

    private static boolean same(Outcome a, Outcome b) {
        if (a.requests.size() != b.requests.size() || !Objects.equals(a.error, b.error)) {
            return false;
        }
        for (int i = 0; i < a.requests.size(); i++) {
            if (!a.requests.get(i).sameAs(b.requests.get(i))) {
                return false;
            }
        }
        return true;
    }
}
