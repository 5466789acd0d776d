package dev.rbridge.nbd.protocol;

import static dev.rbridge.nbd.protocol.WireBytes.infoData;
import static dev.rbridge.nbd.protocol.WireBytes.metaData;
import static dev.rbridge.nbd.protocol.WireBytes.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

import org.junit.jupiter.api.Test;

import dev.rbridge.nbd.protocol.OptionRequest.Abort;
import dev.rbridge.nbd.protocol.OptionRequest.ExportName;
import dev.rbridge.nbd.protocol.OptionRequest.ExtendedHeaders;
import dev.rbridge.nbd.protocol.OptionRequest.Info;
import dev.rbridge.nbd.protocol.OptionRequest.ListExports;
import dev.rbridge.nbd.protocol.OptionRequest.Malformed;
import dev.rbridge.nbd.protocol.OptionRequest.MetaContext;
import dev.rbridge.nbd.protocol.OptionRequest.StartTls;
import dev.rbridge.nbd.protocol.OptionRequest.StructuredReply;
import dev.rbridge.nbd.protocol.OptionRequest.TooBig;
import dev.rbridge.nbd.protocol.OptionRequest.Unknown;

class HandshakeDecoderTest {
    private static final int SERVER_FLAGS = Nbd.FLAG_FIXED_NEWSTYLE | Nbd.FLAG_NO_ZEROES;
    private static final int SMALL_MAX = 32;

    /** A client stream and the messages it must decode to (a Malformed's reason is a substring to look for). */
    private record Script(byte[] bytes, int[] ends, List<HandshakeMessage> expected) {
    }

    private static final class ScriptBuilder {
        final WireBytes wire = new WireBytes();
        final List<HandshakeMessage> expected = new ArrayList<>();

        ScriptBuilder flags(int flags) {
            wire.clientFlags(flags);
            expected.add(new ClientFlags(flags));
            return this;
        }

        ScriptBuilder option(int option, byte[] data, HandshakeMessage expect) {
            wire.option(option, data);
            expected.add(expect);
            return this;
        }

        Script build() {
            return new Script(wire.toByteArray(), wire.ends(), List.copyOf(expected));
        }
    }

    private static byte[] repeat(char c, int n) {
        byte[] b = new byte[n];
        Arrays.fill(b, (byte) c);
        return b;
    }

    /** Every OptionRequest variant, every Malformed path, both size limits; decoded with the default limit. */
    private static Script longScript() {
        byte[] multibyte = utf8("диск-ü-€-😀");
        byte[] disk = utf8("disk0");
        byte[] nameOf4096 = repeat('n', 4096);
        byte[] nameOf4097 = repeat('n', 4097);
        return new ScriptBuilder()
                .flags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES)
                .option(Nbd.OPT_EXPORT_NAME, multibyte, new ExportName("диск-ü-€-😀"))
                .option(Nbd.OPT_EXPORT_NAME, new byte[0], new ExportName(""))
                .option(Nbd.OPT_EXPORT_NAME, nameOf4096, new ExportName("n".repeat(4096)))
                .option(Nbd.OPT_ABORT, new byte[0], new Abort())
                .option(Nbd.OPT_LIST, new byte[0], new ListExports())
                .option(Nbd.OPT_STARTTLS, new byte[0], new StartTls())
                .option(Nbd.OPT_STRUCTURED_REPLY, new byte[0], new StructuredReply())
                .option(Nbd.OPT_EXTENDED_HEADERS, new byte[0], new ExtendedHeaders())
                .option(Nbd.OPT_INFO, infoData(disk, Nbd.INFO_NAME, Nbd.INFO_DESCRIPTION, Nbd.INFO_BLOCK_SIZE),
                        new Info(false, "disk0", List.of(1, 2, 3)))
                .option(Nbd.OPT_GO, infoData(multibyte, Nbd.INFO_EXPORT, Nbd.INFO_NAME, Nbd.INFO_BLOCK_SIZE, 0xFFFF),
                        new Info(true, "диск-ü-€-😀", List.of(0, 1, 3, 65535)))
                .option(Nbd.OPT_GO, infoData(new byte[0]), new Info(true, "", List.of()))
                .option(Nbd.OPT_LIST_META_CONTEXT, metaData(disk), new MetaContext(false, "disk0", List.of()))
                .option(Nbd.OPT_LIST_META_CONTEXT, metaData(disk, utf8("base:")),
                        new MetaContext(false, "disk0", List.of("base:")))
                .option(Nbd.OPT_SET_META_CONTEXT, metaData(new byte[0]), new MetaContext(true, "", List.of()))
                .option(Nbd.OPT_SET_META_CONTEXT, metaData(disk, utf8("base:allocation")),
                        new MetaContext(true, "disk0", List.of("base:allocation")))
                .option(Nbd.OPT_SET_META_CONTEXT,
                        metaData(multibyte, utf8("base:allocation"), utf8("qemu:dirty-bitmap:b1"), utf8("x-ü")),
                        new MetaContext(true, "диск-ü-€-😀", List.of("base:allocation", "qemu:dirty-bitmap:b1", "x-ü")))
                // options this server does not know, with and without data; option numbers are unsigned 32-bit
                .option(99, utf8("whatever"), new Unknown(99))
                .option(Nbd.OPT_PEEK_EXPORT, new byte[0], new Unknown(Nbd.OPT_PEEK_EXPORT))
                .option(0, new byte[0], new Unknown(0))
                .option(0xFFFFFFFF, new byte[3], new Unknown(-1))
                // malformed: data where none belongs
                .option(Nbd.OPT_LIST, new byte[]{1, 2, 3}, new Malformed(Nbd.OPT_LIST, "3 bytes"))
                .option(Nbd.OPT_ABORT, new byte[1], new Malformed(Nbd.OPT_ABORT, "no data"))
                .option(Nbd.OPT_STRUCTURED_REPLY, new byte[4], new Malformed(Nbd.OPT_STRUCTURED_REPLY, "no data"))
                // malformed INFO/GO
                .option(Nbd.OPT_INFO, new WireBytes().u32(100).bytes(disk).u16(0).toByteArray(),
                        new Malformed(Nbd.OPT_INFO, "overruns"))
                .option(Nbd.OPT_INFO, new WireBytes().u32(5).bytes(disk).toByteArray(), // no room for the count
                        new Malformed(Nbd.OPT_INFO, "overruns"))
                .option(Nbd.OPT_GO, new byte[]{0, 0}, new Malformed(Nbd.OPT_GO, "ends before"))
                .option(Nbd.OPT_GO, new WireBytes().u32(5).bytes(disk).u16(3).u16(1).u16(2).toByteArray(),
                        new Malformed(Nbd.OPT_GO, "information requests"))
                .option(Nbd.OPT_INFO, new WireBytes().u32(5).bytes(disk).u16(1).u16(1).u16(2).toByteArray(),
                        new Malformed(Nbd.OPT_INFO, "information requests"))
                .option(Nbd.OPT_INFO, infoData(new byte[]{'a', (byte) 0xFF}, 1), new Malformed(Nbd.OPT_INFO, "UTF-8"))
                .option(Nbd.OPT_GO, infoData(nameOf4097, 1), new Malformed(Nbd.OPT_GO, "4096"))
                // malformed META_CONTEXT
                .option(Nbd.OPT_SET_META_CONTEXT,
                        new WireBytes().bytes(metaData(disk, utf8("base:allocation"))).u8(0).toByteArray(),
                        new Malformed(Nbd.OPT_SET_META_CONTEXT, "follow the last query"))
                .option(Nbd.OPT_LIST_META_CONTEXT, new WireBytes().bytes(metaData(disk)).u32(7).toByteArray(),
                        new Malformed(Nbd.OPT_LIST_META_CONTEXT, "follow the last query"))
                .option(Nbd.OPT_LIST_META_CONTEXT, new WireBytes().u32(5).bytes(disk).u32(3).u32(0).toByteArray(),
                        new Malformed(Nbd.OPT_LIST_META_CONTEXT, "cannot fit"))
                .option(Nbd.OPT_SET_META_CONTEXT,
                        new WireBytes().u32(5).bytes(disk).u32(1).u32(50).bytes(disk).toByteArray(),
                        new Malformed(Nbd.OPT_SET_META_CONTEXT, "overruns"))
                .option(Nbd.OPT_SET_META_CONTEXT, new WireBytes().u32(9).bytes(disk).u32(0).toByteArray(),
                        new Malformed(Nbd.OPT_SET_META_CONTEXT, "overruns"))
                .option(Nbd.OPT_LIST_META_CONTEXT, metaData(disk, repeat('q', 4097)),
                        new Malformed(Nbd.OPT_LIST_META_CONTEXT, "4096"))
                .option(Nbd.OPT_LIST_META_CONTEXT, metaData(disk, new byte[]{'b', 0, 'c'}),
                        new Malformed(Nbd.OPT_LIST_META_CONTEXT, "NUL"))
                // malformed names
                .option(Nbd.OPT_EXPORT_NAME, new byte[]{'x', (byte) 0xC3, 0x28},
                        new Malformed(Nbd.OPT_EXPORT_NAME, "UTF-8"))
                .option(Nbd.OPT_EXPORT_NAME, new byte[]{(byte) 0xC0, (byte) 0x80}, // overlong NUL ("modified UTF-8")
                        new Malformed(Nbd.OPT_EXPORT_NAME, "UTF-8"))
                .option(Nbd.OPT_EXPORT_NAME, new byte[]{(byte) 0xED, (byte) 0xA0, (byte) 0x80}, // a lone surrogate
                        new Malformed(Nbd.OPT_EXPORT_NAME, "UTF-8"))
                .option(Nbd.OPT_EXPORT_NAME, new byte[]{'a', (byte) 0xE2, (byte) 0x82}, // truncated sequence
                        new Malformed(Nbd.OPT_EXPORT_NAME, "UTF-8"))
                .option(Nbd.OPT_EXPORT_NAME, new byte[]{'a', 0, 'b'}, new Malformed(Nbd.OPT_EXPORT_NAME, "NUL"))
                .option(Nbd.OPT_EXPORT_NAME, nameOf4097, new Malformed(Nbd.OPT_EXPORT_NAME, "4096"))
                .option(Nbd.OPT_INFO, infoData(new byte[]{0}), new Malformed(Nbd.OPT_INFO, "NUL"))
                // size limit: exactly the maximum is buffered and parsed, one more is skipped
                .option(123, new byte[HandshakeDecoder.DEFAULT_MAX_OPTION_DATA], new Unknown(123))
                .option(Nbd.OPT_EXPORT_NAME, new byte[HandshakeDecoder.DEFAULT_MAX_OPTION_DATA + 1],
                        new TooBig(Nbd.OPT_EXPORT_NAME, HandshakeDecoder.DEFAULT_MAX_OPTION_DATA + 1))
                .option(Nbd.OPT_ABORT, new byte[0], new Abort())
                .build();
    }

    /** About a dozen options, decoded with a small maxOptionData so TooBig needs only a few bytes. */
    private static Script shortScript() {
        return new ScriptBuilder()
                .flags(Nbd.FLAG_C_FIXED_NEWSTYLE)
                .option(Nbd.OPT_STRUCTURED_REPLY, new byte[0], new StructuredReply())
                .option(Nbd.OPT_INFO, infoData(utf8("é"), Nbd.INFO_BLOCK_SIZE), new Info(false, "é", List.of(3)))
                .option(77, new byte[SMALL_MAX], new Unknown(77))
                .option(Nbd.OPT_EXPORT_NAME, repeat('e', SMALL_MAX + 1), new TooBig(Nbd.OPT_EXPORT_NAME, SMALL_MAX + 1))
                .option(Nbd.OPT_LIST, new byte[2], new Malformed(Nbd.OPT_LIST, "no data"))
                .option(Nbd.OPT_GO, infoData(repeat('g', 40), 1, 2), new TooBig(Nbd.OPT_GO, 4 + 40 + 2 + 4))
                .option(Nbd.OPT_SET_META_CONTEXT, metaData(utf8("d"), utf8("base:allocation")),
                        new MetaContext(true, "d", List.of("base:allocation")))
                .option(Nbd.OPT_LIST, new byte[0], new ListExports())
                .option(Nbd.OPT_INFO, new byte[]{0, 0, 0, 9, 'x', 0, 0}, new Malformed(Nbd.OPT_INFO, "overruns"))
                .option(Nbd.OPT_GO, infoData(new byte[0]), new Info(true, "", List.of()))
                .option(Nbd.OPT_EXPORT_NAME, utf8("€"), new ExportName("€"))
                .build();
    }

    private static List<HandshakeMessage> decode(Script s, int maxOptionData, int[] cuts, boolean direct)
            throws NbdProtocolException {
        HandshakeDecoder decoder = new HandshakeDecoder(SERVER_FLAGS, maxOptionData);
        return WireBytes.feed(decoder::next, s.bytes(), cuts, s.ends(), direct);
    }

    /** Equal to the script, except that a Malformed only has to name the expected option and mention its reason. */
    private static void assertMatches(List<HandshakeMessage> expected, List<HandshakeMessage> actual, String how) {
        assertEquals(expected.size(), actual.size(), how + ": message count");
        for (int i = 0; i < expected.size(); i++) {
            HandshakeMessage e = expected.get(i);
            HandshakeMessage a = actual.get(i);
            if (e instanceof Malformed m) {
                Malformed am = assertInstanceOf(Malformed.class, a, how + ": message #" + i);
                assertEquals(m.option(), am.option(), how + ": option of message #" + i);
                assertTrue(am.reason().toLowerCase().contains(m.reason().toLowerCase()),
                        how + ": reason of message #" + i + " should mention '" + m.reason() + "': " + am.reason());
            } else {
                assertEquals(e, a, how + ": message #" + i);
            }
        }
    }

    @Test
    void longStreamDecodesTheSameHoweverItIsSplit() throws Exception {
        Script s = longScript();
        int max = HandshakeDecoder.DEFAULT_MAX_OPTION_DATA;
        int n = s.bytes().length;
        List<HandshakeMessage> reference = decode(s, max, WireBytes.whole(n), false);
        assertMatches(s.expected(), reference, "one buffer");

        assertEquals(reference, decode(s, max, WireBytes.byteByByte(n), false), "one byte at a time");
        assertEquals(reference, decode(s, max, WireBytes.whole(n), true), "one direct buffer");
        Random random = new Random(42);
        for (int i = 0; i < 40; i++) {
            int p = random.nextInt(n + 1);
            assertEquals(reference, decode(s, max, WireBytes.splitAt(p, n), i % 2 == 0), "split at " + p);
        }
        // split right before and after every message boundary as well
        for (int end : s.ends()) {
            for (int p = Math.max(0, end - 2); p <= Math.min(n, end + 2); p++) {
                assertEquals(reference, decode(s, max, WireBytes.splitAt(p, n), false), "split at " + p);
            }
        }
        for (long seed = 1; seed <= 8; seed++) {
            assertEquals(reference, decode(s, max, WireBytes.randomChunks(n, seed), seed % 2 == 0),
                    "random chunks, seed " + seed);
        }
    }

    @Test
    void shortStreamDecodesTheSameWhereverItIsSplit() throws Exception {
        Script s = shortScript();
        int n = s.bytes().length;
        List<HandshakeMessage> reference = decode(s, SMALL_MAX, WireBytes.whole(n), false);
        assertMatches(s.expected(), reference, "one buffer");
        assertEquals(reference, decode(s, SMALL_MAX, WireBytes.byteByByte(n), true), "one byte at a time");
        for (int p = 0; p <= n; p++) {
            assertEquals(reference, decode(s, SMALL_MAX, WireBytes.splitAt(p, n), p % 3 == 0), "split at " + p);
        }
        for (long seed = 1; seed <= 20; seed++) {
            assertEquals(reference, decode(s, SMALL_MAX, WireBytes.randomChunks(n, seed), false),
                    "random chunks, seed " + seed);
        }
    }

    @Test
    void optionAtTheDefaultLimitIsBufferedAndOneMoreIsSkipped() throws Exception {
        int max = HandshakeDecoder.DEFAULT_MAX_OPTION_DATA;
        assertEquals(64 * 1024, max);
        byte[] name = repeat('z', 10);
        byte[] atLimit = new byte[max];
        // a GO whose data is exactly max bytes: name, count, then padding the count does not cover -> Malformed
        System.arraycopy(infoData(name), 0, atLimit, 0, 4 + 10 + 2);
        WireBytes w = new WireBytes().clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE)
                .option(Nbd.OPT_GO, atLimit)
                .option(Nbd.OPT_GO, new byte[max + 1])
                .option(Nbd.OPT_ABORT, new byte[0]);
        List<HandshakeMessage> got = WireBytes.feed(new HandshakeDecoder(SERVER_FLAGS)::next, w.toByteArray(),
                WireBytes.randomChunks(w.size(), 5), w.ends(), false);
        Malformed m = assertInstanceOf(Malformed.class, got.get(1), "max bytes of data are parsed");
        assertEquals(Nbd.OPT_GO, m.option());
        assertEquals(new TooBig(Nbd.OPT_GO, max + 1L), got.get(2));
        assertEquals(new Abort(), got.get(3));
    }

    @Test
    void tooBigLengthIsUnsignedAndAllOfItIsSkipped() throws Exception {
        HandshakeDecoder decoder = new HandshakeDecoder(SERVER_FLAGS, SMALL_MAX);
        ByteBuffer head = ByteBuffer.wrap(new WireBytes().clientFlags(1).u64(Nbd.OPTS_MAGIC).u32(Nbd.OPT_GO)
                .u32(0xFFFFFFFFL).toByteArray());
        assertEquals(new ClientFlags(1), decoder.next(head));
        assertNull(decoder.next(head));
        assertFalse(head.hasRemaining());

        // 4 GiB - 1 of data, fed from one 16 MiB buffer over and over
        ByteBuffer chunk = ByteBuffer.allocate(16 << 20).asReadOnlyBuffer();
        long left = 0xFFFFFFFFL;
        HandshakeMessage m = null;
        while (left > 0) {
            int n = (int) Math.min(left, chunk.capacity());
            chunk.clear().limit(n);
            m = decoder.next(chunk);
            assertFalse(chunk.hasRemaining());
            left -= n;
            if (left > 0) {
                assertNull(m, "returned before the whole option data was skipped, " + left + " bytes left");
            }
        }
        assertEquals(new TooBig(Nbd.OPT_GO, 0xFFFFFFFFL), m);
        ByteBuffer next = ByteBuffer.wrap(new WireBytes().option(Nbd.OPT_LIST, new byte[0]).toByteArray());
        assertEquals(new ListExports(), decoder.next(next));
        assertFalse(next.hasRemaining());
    }

    @Test
    void bytesAfterTheLastOptionStayForTheTransmissionDecoder() throws Exception {
        byte[] payload = {9, 8, 7};
        WireBytes w = new WireBytes().clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES)
                .option(Nbd.OPT_GO, infoData(utf8("d")))
                .request(0, Nbd.CMD_WRITE, 0x1234, 512, 3, payload)
                .request(0, Nbd.CMD_DISC, 0x99, 0, 0, null);
        int[] ends = w.ends();
        ByteBuffer in = ByteBuffer.wrap(w.toByteArray());
        HandshakeDecoder hs = new HandshakeDecoder(SERVER_FLAGS);
        assertTrue(assertInstanceOf(ClientFlags.class, hs.next(in)).noZeroes());
        assertEquals(ends[0], in.position());
        assertEquals(new Info(true, "d", List.of()), hs.next(in));
        assertEquals(ends[1], in.position(), "GO must leave the pipelined requests in the buffer");
        assertEquals(w.size() - ends[1], in.remaining());

        RequestDecoder rd = new RequestDecoder(PayloadAllocator.HEAP, 1 << 20);
        Request write = rd.next(in);
        assertEquals(Nbd.CMD_WRITE, write.type());
        assertEquals(0x1234, write.handle());
        assertEquals(ByteBuffer.wrap(payload), write.payload());
        Request disc = rd.next(in);
        assertEquals(Nbd.CMD_DISC, disc.type());
        assertFalse(in.hasRemaining());
    }

    @Test
    void wrongOptionMagicIsAProtocolErrorNamingTheMagic() throws Exception {
        long bad = 0x49484156454F5055L; // "IHAVEOPU"
        WireBytes w = new WireBytes().clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE)
                .option(Nbd.OPT_LIST, new byte[0])
                .u64(bad).u32(Nbd.OPT_LIST).u32(0);
        byte[] bytes = w.toByteArray();
        // whole buffer: the valid messages come out first, then the bad header throws
        HandshakeDecoder d1 = new HandshakeDecoder(SERVER_FLAGS);
        ByteBuffer in = ByteBuffer.wrap(bytes);
        assertInstanceOf(ClientFlags.class, d1.next(in));
        assertEquals(new ListExports(), d1.next(in));
        NbdProtocolException e = assertThrows(NbdProtocolException.class, () -> d1.next(in));
        assertTrue(e.getMessage().toLowerCase().contains(Long.toHexString(bad)), e.getMessage());

        // byte by byte: nothing is thrown before the 8-byte magic plus the rest of the header arrived
        HandshakeDecoder d2 = new HandshakeDecoder(SERVER_FLAGS);
        int messages = 0;
        int i = 0;
        NbdProtocolException thrown = null;
        for (; i < bytes.length; i++) {
            try {
                if (d2.next(ByteBuffer.wrap(bytes, i, 1)) != null) {
                    messages++;
                }
            } catch (NbdProtocolException x) {
                thrown = x;
                break;
            }
        }
        assertEquals(2, messages);
        assertTrue(thrown != null, "bad magic not detected");
        assertTrue(i >= w.ends()[1] + 7, "thrown at byte " + i + " before the magic was complete");
        assertTrue(thrown.getMessage().toLowerCase().contains(Long.toHexString(bad)), thrown.getMessage());

        // the magic of a different phase (the server's NBDMAGIC) is no option either
        HandshakeDecoder d3 = new HandshakeDecoder(SERVER_FLAGS);
        ByteBuffer in3 =
                ByteBuffer.wrap(new WireBytes().clientFlags(1).u64(Nbd.INIT_MAGIC).u32(1).u32(0).toByteArray());
        d3.next(in3);
        assertThrows(NbdProtocolException.class, () -> d3.next(in3));
    }

    @Test
    void unknownClientFlagBitsAreAProtocolError() {
        for (int flags : new int[]{1 << 2, 1 << 31, Nbd.FLAG_C_FIXED_NEWSTYLE | 1 << 5, 0xFFFFFFFF}) {
            HandshakeDecoder d = new HandshakeDecoder(SERVER_FLAGS);
            ByteBuffer in = ByteBuffer.wrap(new WireBytes().clientFlags(flags).toByteArray());
            assertThrows(NbdProtocolException.class, () -> d.next(in), "client flags 0x" + Integer.toHexString(flags));
        }
    }

    @Test
    void noZeroesOnlyWhenTheServerOfferedIt() throws Exception {
        int flags = Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES;
        HandshakeDecoder notOffered = new HandshakeDecoder(Nbd.FLAG_FIXED_NEWSTYLE);
        assertThrows(NbdProtocolException.class,
                () -> notOffered.next(ByteBuffer.wrap(new WireBytes().clientFlags(flags).toByteArray())));

        ClientFlags offered = assertInstanceOf(ClientFlags.class, new HandshakeDecoder(SERVER_FLAGS)
                .next(ByteBuffer.wrap(new WireBytes().clientFlags(flags).toByteArray())));
        assertTrue(offered.noZeroes());
        assertTrue(offered.fixedNewstyle());
        assertEquals(flags, offered.flags());

        ClientFlags without = assertInstanceOf(ClientFlags.class, new HandshakeDecoder(Nbd.FLAG_FIXED_NEWSTYLE)
                .next(ByteBuffer.wrap(new WireBytes().clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE).toByteArray())));
        assertFalse(without.noZeroes());
        assertTrue(without.fixedNewstyle());
    }

    @Test
    void clientFlagsAreReadOnlyOnce() throws Exception {
        // a second u32 that looks like client flags is the start of an option header, not flags again
        HandshakeDecoder d = new HandshakeDecoder(SERVER_FLAGS);
        ByteBuffer in =
                ByteBuffer.wrap(new WireBytes().clientFlags(1).clientFlags(1).u32(0).u32(0).u32(0).toByteArray());
        assertEquals(new ClientFlags(1), d.next(in));
        assertThrows(NbdProtocolException.class, () -> d.next(in));
    }

    @Test
    void parseIsUsableWithoutAStream() {
        ByteBuffer data = ByteBuffer.wrap(infoData("x".getBytes(StandardCharsets.UTF_8), 2));
        assertEquals(new Info(false, "x", List.of(2)), HandshakeDecoder.parse(Nbd.OPT_INFO, data));
        assertEquals(new Unknown(4711), HandshakeDecoder.parse(4711, ByteBuffer.allocate(5)));
    }
}
