package dev.rbridge.nbd.protocol;

import static dev.rbridge.fuzz.Feeds.check;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.junit.jupiter.api.Tag;

import com.code_intelligence.jazzer.api.FuzzedDataProvider;
import com.code_intelligence.jazzer.junit.FuzzTest;

import dev.rbridge.fuzz.Feeds;

/**
 * The handshake decoder against any bytes a client can send before transmission: the client flags, then typed
 * options (unknown, malformed and oversized ones included) or {@link NbdProtocolException}, nothing else. Every
 * parsed option re-encodes to exactly the bytes it consumed (the option data has one encoding); a string never
 * exceeds the spec's limit; an option's data is never more than was sent, and beyond the limit it is skipped, not
 * kept; the same messages whole, cut in two, or a byte at a time. Parameters (4 bytes each from the end, see
 * {@link Feeds}): cut position, whether the server offers NO_ZEROES, the option data limit.
 */
@Tag("fuzz")
class HandshakeDecoderFuzzTest {
    private record Outcome(List<HandshakeMessage> messages, String error) {
    }

    @FuzzTest(maxDuration = "10s")
    void decode(FuzzedDataProvider data) {
        int cut = data.consumeInt();
        int serverFlags = Nbd.FLAG_FIXED_NEWSTYLE | ((data.consumeInt() & 1) != 0 ? Nbd.FLAG_NO_ZEROES : 0);
        int maxOptionData = Math.floorMod(data.consumeInt(), 2 * HandshakeDecoder.DEFAULT_MAX_OPTION_DATA);
        byte[] stream = data.consumeRemainingAsBytes();
        Outcome first = null;
        for (int mode = 0; mode < Feeds.modes(stream.length); mode++) {
            Outcome o = run(stream, Feeds.limits(mode, stream.length, cut), serverFlags, maxOptionData);
            if (first == null) {
                first = o;
            } else if (!first.equals(o)) {
                throw new AssertionError("feeding mode " + mode + " decoded " + o + ", whole input " + first);
            }
        }
    }

    private static Outcome run(byte[] stream, int[] limits, int serverFlags, int maxOptionData) {
        HandshakeDecoder decoder = new HandshakeDecoder(serverFlags, maxOptionData);
        ByteBuffer in = ByteBuffer.wrap(stream);
        List<HandshakeMessage> out = new ArrayList<>();
        int start = 0;
        for (int limit : limits) {
            in.limit(limit);
            while (true) {
                HandshakeMessage m;
                try {
                    m = decoder.next(in);
                } catch (NbdProtocolException e) {
                    check(e.getMessage() != null && !e.getMessage().isEmpty(), "a protocol error without a message");
                    int took = in.position() - start;
                    check(took == (out.isEmpty() ? 4 : 16), () -> "a bad header after " + took + " bytes");
                    return new Outcome(out, e.getMessage());
                }
                if (m == null) {
                    check(!in.hasRemaining(), () -> "the decoder stopped with " + in.remaining() + " bytes unread");
                    break;
                }
                check(out.isEmpty() == m instanceof ClientFlags, () -> m + " out of order");
                checkEncoding(m, stream, start, in.position(), serverFlags, maxOptionData);
                out.add(m);
                start = in.position();
            }
        }
        return new Outcome(out, null);
    }

    private static void checkEncoding(HandshakeMessage m, byte[] stream, int start, int end, int serverFlags,
            int maxOptionData) {
        ByteBuffer sent = ByteBuffer.wrap(stream, start, end - start).slice();
        if (m instanceof ClientFlags f) {
            int offered =
                    Nbd.FLAG_C_FIXED_NEWSTYLE | ((serverFlags & Nbd.FLAG_NO_ZEROES) != 0 ? Nbd.FLAG_C_NO_ZEROES : 0);
            check(end - start == 4 && sent.getInt(0) == f.flags(), () -> m + " is not the 4 bytes it came from");
            check((f.flags() & ~offered) == 0, () -> m + " has flags the server did not offer");
            return;
        }
        OptionRequest o = (OptionRequest) m;
        check(end - start >= 16 && sent.getLong(0) == Nbd.OPTS_MAGIC && sent.getInt(8) == o.option(),
                () -> m + " is not the option header it came from");
        long dataLength = Integer.toUnsignedLong(sent.getInt(12));
        check(end - start == 16 + dataLength,
                () -> m + " took " + (end - start) + " bytes for " + dataLength + " of data");
        byte[] optionData = Arrays.copyOfRange(stream, start + 16, end);
        switch (o) {
            case OptionRequest.TooBig t -> check(t.length() == dataLength && dataLength > maxOptionData,
                    () -> m + " within the limit " + maxOptionData);
            case OptionRequest.Unknown u -> check(dataLength <= maxOptionData
                    && HandshakeDecoder.parse(u.option(), ByteBuffer.allocate(0)) instanceof OptionRequest.Unknown,
                    () -> m + " above the limit, or an option this server knows");
            case OptionRequest.Malformed bad -> {
                check(dataLength <= maxOptionData && bad.reason() != null && !bad.reason().isEmpty(),
                        () -> m + " names no reason");
                check(HandshakeDecoder.parse(o.option(), ByteBuffer.wrap(optionData)).equals(m),
                        () -> m + " parses differently alone");
            }
            default -> {
                check(dataLength <= maxOptionData, () -> m + " above the limit was parsed");
                check(Arrays.equals(encode(o), optionData), () -> m + " re-encodes to other bytes than it came from");
            }
        }
    }

    /** The option data a client sends for a parsed option: the spec's layout. */
    private static byte[] encode(OptionRequest o) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        switch (o) {
            case OptionRequest.ExportName e -> out.writeBytes(utf8(e.name()));
            case OptionRequest.Info i -> {
                byte[] name = utf8(i.name());
                ByteBuffer b = ByteBuffer.allocate(4 + name.length + 2 + 2 * i.requests().size());
                b.putInt(name.length).put(name).putShort((short) i.requests().size());
                i.requests().forEach(r -> b.putShort((short) (int) r));
                out.writeBytes(b.array());
            }
            case OptionRequest.MetaContext c -> {
                byte[] name = utf8(c.exportName());
                ByteBuffer b = ByteBuffer.allocate(4 + name.length + 4);
                out.writeBytes(b.putInt(name.length).put(name).putInt(c.queries().size()).array());
                for (String q : c.queries()) {
                    byte[] qb = utf8(q);
                    out.writeBytes(ByteBuffer.allocate(4).putInt(qb.length).array());
                    out.writeBytes(qb);
                }
            }
            default -> {
                // the options without data
            }
        }
        return out.toByteArray();
    }

    private static byte[] utf8(String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        check(b.length <= Nbd.MAX_STRING_LENGTH, () -> "a string of " + b.length + " bytes was accepted");
        return b;
    }
}
