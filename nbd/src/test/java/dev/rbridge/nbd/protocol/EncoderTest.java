package dev.rbridge.nbd.protocol;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.function.Consumer;

import org.junit.jupiter.api.Test;

/** Byte-exact layouts, written out by hand from doc/proto.md (big-endian). */
class EncoderTest {
    private static final HexFormat HEX = HexFormat.of();
    private static final String OPTION_REPLY_MAGIC = "0003e889045565a9";
    private static final String CHUNK_MAGIC = "668e33ef";

    /** The readable bytes of a handshake buffer (which must be flipped: position 0). */
    private static String hex(ByteBuffer b) {
        assertEquals(0, b.position(), "handshake buffers come flipped, ready to write");
        byte[] a = new byte[b.remaining()];
        b.duplicate().get(a);
        return HEX.formatHex(a);
    }

    private static String hexOf(String s) {
        return HEX.formatHex(s.getBytes(StandardCharsets.UTF_8));
    }

    /** Runs a ReplyEncoder method on a buffer that already holds 3 bytes; returns what it appended. */
    private static String appended(int expectedLength, Consumer<ByteBuffer> encode) {
        ByteBuffer dst = ByteBuffer.allocate(3 + expectedLength + 16);
        dst.put(new byte[]{(byte) 0xEE, (byte) 0xEE, (byte) 0xEE});
        encode.accept(dst);
        assertEquals(3 + expectedLength, dst.position(), "bytes written");
        assertEquals("eeeeee", HEX.formatHex(dst.array(), 0, 3), "bytes before the position untouched");
        return HEX.formatHex(dst.array(), 3, 3 + expectedLength);
    }

    private static String strictUtf8(byte[] b) throws CharacterCodingException {
        return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(b)).toString();
    }

    // ---------------------------------------------------------------- handshake

    @Test
    void greeting() {
        ByteBuffer g = HandshakeEncoder.greeting(Nbd.FLAG_FIXED_NEWSTYLE | Nbd.FLAG_NO_ZEROES);
        assertEquals(hexOf("NBDMAGIC") + hexOf("IHAVEOPT") + "0003", hex(g));
        assertEquals("4e42444d41474943" + "49484156454f5054" + "0001", hex(HandshakeEncoder.greeting(1)));
        assertEquals(18, g.remaining());
    }

    @Test
    void exportNameReplyWithAndWithoutZeroes() {
        String head = "0102030405060708" + "8123";
        assertEquals(head + "00".repeat(124),
                hex(HandshakeEncoder.exportNameReply(0x0102030405060708L, 0x8123, false)));
        assertEquals(head, hex(HandshakeEncoder.exportNameReply(0x0102030405060708L, 0x8123, true)));
        assertEquals(134, HandshakeEncoder.exportNameReply(1, 1, false).remaining());
        assertEquals(10, HandshakeEncoder.exportNameReply(1, 1, true).remaining());
    }

    @Test
    void optionReplies() {
        assertEquals(OPTION_REPLY_MAGIC + "00000007" + "00000003" + "00000002" + "aabb",
                hex(HandshakeEncoder.reply(Nbd.OPT_GO, Nbd.REP_INFO,
                        ByteBuffer.wrap(new byte[]{(byte) 0xAA, (byte) 0xBB}))));
        assertEquals(OPTION_REPLY_MAGIC + "00000001" + "00000001" + "00000000",
                hex(HandshakeEncoder.ack(Nbd.OPT_EXPORT_NAME)));
        assertEquals(OPTION_REPLY_MAGIC + "0000000a" + "00000001" + "00000000",
                hex(HandshakeEncoder.ack(Nbd.OPT_SET_META_CONTEXT)));
        // an option number the server does not know is echoed as sent, all 32 bits
        assertEquals(OPTION_REPLY_MAGIC + "fffffffe" + "80000001" + "00000000",
                hex(HandshakeEncoder.error(0xFFFFFFFE, Nbd.REP_ERR_UNSUP, "")));
        assertEquals(OPTION_REPLY_MAGIC + "00000007" + "80000006" + "0000000e" + hexOf("no such export"),
                hex(HandshakeEncoder.error(Nbd.OPT_GO, Nbd.REP_ERR_UNKNOWN, "no such export")));
        assertEquals(OPTION_REPLY_MAGIC + "00000003" + "80000003" + "00000002" + "c3a9",
                hex(HandshakeEncoder.error(Nbd.OPT_LIST, Nbd.REP_ERR_INVALID, "é")));
    }

    @Test
    void replyDataIsConsumedFromItsPosition() {
        ByteBuffer data = ByteBuffer.wrap(new byte[]{1, 2, 3, 4}).position(1);
        assertEquals(OPTION_REPLY_MAGIC + "00000006" + "00000003" + "00000003" + "020304",
                hex(HandshakeEncoder.reply(Nbd.OPT_INFO, Nbd.REP_INFO, data)));
    }

    @Test
    void serverReply() {
        assertEquals("00000004" + hexOf("disk") + hexOf("my disk"), hex(HandshakeEncoder.server("disk", "my disk")));
        assertEquals("00000002" + "c3bc", hex(HandshakeEncoder.server("ü", null)));
        assertEquals("00000000", hex(HandshakeEncoder.server("", "")));
    }

    @Test
    void infoItems() {
        assertEquals("0000" + "0000001000000000" + "8d01", hex(HandshakeEncoder.infoExport(64L << 30, 0x8d01)));
        assertEquals("0000" + "ffffffffffffffff" + "0001", hex(HandshakeEncoder.infoExport(-1L, 1)));
        assertEquals("0001" + hexOf("disk0"), hex(HandshakeEncoder.infoName("disk0")));
        assertEquals("0001", hex(HandshakeEncoder.infoName("")));
        assertEquals("0002" + hexOf("A disk, ü"), hex(HandshakeEncoder.infoDescription("A disk, ü")));
        assertEquals("0003" + "00000001" + "00001000" + "02000000",
                hex(HandshakeEncoder.infoBlockSize(1, 4096, 32 << 20)));
        assertEquals("0003" + "00000200" + "00010000" + "ffffffff",
                hex(HandshakeEncoder.infoBlockSize(512, 65536, 0xFFFFFFFF)));
    }

    @Test
    void metaContextReplyData() {
        assertEquals("00000001" + hexOf("base:allocation"), hex(HandshakeEncoder.metaContext(1, "base:allocation")));
        assertEquals("80000000" + hexOf("x"), hex(HandshakeEncoder.metaContext(0x80000000, "x")));
    }

    @Test
    void longErrorMessagesAreCutAtACharacterBoundary() throws Exception {
        // 3-byte characters: 4096 is not a multiple of 3, so the cut falls inside a character and must back off
        String euros = "€".repeat(2000);
        ByteBuffer e = HandshakeEncoder.error(Nbd.OPT_GO, Nbd.REP_ERR_UNKNOWN, euros);
        int length = e.getInt(16);
        assertTrue(length <= Nbd.MAX_STRING_LENGTH, "length " + length);
        assertEquals(4095, length, "1365 whole characters");
        assertEquals(20 + length, e.remaining());
        byte[] text = new byte[length];
        e.get(20, text);
        assertEquals("€".repeat(1365), strictUtf8(text));

        // 4-byte characters after one ASCII byte: backs off over three continuation bytes
        byte[] cut = ReplyEncoder.message("a" + "😀".repeat(1100));
        assertEquals(1 + 4 * 1023, cut.length);
        assertEquals("a" + "😀".repeat(1023), strictUtf8(cut));

        // at a boundary nothing more is removed; short messages are untouched
        assertEquals(4096, ReplyEncoder.message("é".repeat(3000)).length);
        assertEquals(4096, ReplyEncoder.message("x".repeat(4096)).length);
        assertEquals(4096, ReplyEncoder.message("x".repeat(5000)).length);
        assertArrayEquals("short ü".getBytes(StandardCharsets.UTF_8), ReplyEncoder.message("short ü"));
    }

    // ---------------------------------------------------------------- transmission

    @Test
    void simpleReply() {
        assertEquals("67446698" + "00000016" + "8000000000000001",
                appended(16, b -> ReplyEncoder.simpleReply(b, 0x8000000000000001L, Errno.EINVAL.code())));
        assertEquals("67446698" + "00000000" + "ffffffffffffffff",
                appended(16, b -> ReplyEncoder.simpleReply(b, -1L, 0)));
    }

    @Test
    void offsetDataHeader() {
        assertEquals(28, ReplyEncoder.offsetDataHeaderLength());
        assertEquals(CHUNK_MAGIC + "0001" + "0001" + "0000000000000005" + "00001008" + "fffffffffffff000",
                appended(28, b -> ReplyEncoder.offsetDataHeader(b, Nbd.REPLY_FLAG_DONE, 5, 0xFFFFFFFFFFFFF000L, 4096)));
        assertEquals(CHUNK_MAGIC + "0000" + "0001" + "0000000000000006" + "00000008" + "0000000000000000",
                appended(28, b -> ReplyEncoder.offsetDataHeader(b, 0, 6, 0, 0)));
    }

    @Test
    void offsetHole() {
        assertEquals(CHUNK_MAGIC + "0000" + "0002" + "0000000000000006" + "0000000c" + "0000000000001000" + "00002000",
                appended(32, b -> ReplyEncoder.offsetHole(b, 0, 6, 4096, 8192)));
        assertEquals(CHUNK_MAGIC + "0001" + "0002" + "0000000000000006" + "0000000c" + "8000000000000000" + "ffffffff",
                appended(32, b -> ReplyEncoder.offsetHole(b, Nbd.REPLY_FLAG_DONE, 6, Long.MIN_VALUE, -1)));
    }

    @Test
    void none() {
        assertEquals(CHUNK_MAGIC + "0001" + "0000" + "0000000000000007" + "00000000",
                appended(20, b -> ReplyEncoder.none(b, 7)));
    }

    @Test
    void errorChunk() {
        byte[] msg = ReplyEncoder.message("bad");
        assertEquals(29, ReplyEncoder.errorChunkLength(msg));
        assertEquals(CHUNK_MAGIC + "0001" + "8001" + "0000000000000008" + "00000009" + "00000005" + "0003" + "626164",
                appended(29, b -> ReplyEncoder.errorChunk(b, 8, Errno.EIO.code(), msg)));
        byte[] empty = new byte[0];
        assertEquals(26, ReplyEncoder.errorChunkLength(empty));
        assertEquals(CHUNK_MAGIC + "0001" + "8001" + "0000000000000009" + "00000006" + "0000006c" + "0000",
                appended(26, b -> ReplyEncoder.errorChunk(b, 9, Errno.ESHUTDOWN.code(), empty)));
        byte[] big = ReplyEncoder.message("€".repeat(2000));
        String written = appended(ReplyEncoder.errorChunkLength(big), b -> ReplyEncoder.errorChunk(b, 1, 5, big));
        assertEquals("0fff", written.substring(2 * 24, 2 * 26), "message length field");
        assertEquals(String.format("%08x", 6 + 4095), written.substring(2 * 16, 2 * 20), "chunk length field");
    }

    @Test
    void blockStatus() {
        assertEquals(40, ReplyEncoder.blockStatusLength(2));
        assertEquals(24, ReplyEncoder.blockStatusLength(0));
        int[] lengths = {4096, 8192, 77};
        int[] states = {0, Nbd.STATE_HOLE | Nbd.STATE_ZERO, Nbd.STATE_ZERO};
        assertEquals(CHUNK_MAGIC + "0001" + "0005" + "0000000000000009" + "00000014" + "00000001"
                + "00001000" + "00000000" + "00002000" + "00000003",
                appended(40, b -> ReplyEncoder.blockStatus(b, Nbd.REPLY_FLAG_DONE, 9, 1, lengths, states, 2)));
        assertEquals(CHUNK_MAGIC + "0000" + "0005" + "000000000000000a" + "0000001c" + "00000002"
                + "00001000" + "00000000" + "00002000" + "00000003" + "0000004d" + "00000002",
                appended(48, b -> ReplyEncoder.blockStatus(b, 0, 10, 2, lengths, states, 3)));
        assertEquals(
                CHUNK_MAGIC + "0000" + "0005" + "000000000000000b" + "0000000c" + "00000001" + "fffff000" + "00000003",
                appended(32, b -> ReplyEncoder.blockStatus(b, 0, 11, 1, new int[]{0xFFFFF000}, new int[]{3}, 1)));
    }

    @Test
    void chunkHeader() {
        assertEquals(CHUNK_MAGIC + "0001" + "8002" + "0102030405060708" + "00000100",
                appended(20,
                        b -> ReplyEncoder.chunkHeader(b, 1, Nbd.REPLY_TYPE_ERROR_OFFSET, 0x0102030405060708L, 256)));
    }

    /** The numbers every layout above depends on, against the spec. */
    @Test
    void constantsMatchTheSpec() {
        assertEquals(0x25609513, Nbd.REQUEST_MAGIC);
        assertEquals(0x67446698, Nbd.SIMPLE_REPLY_MAGIC);
        assertEquals(0x668e33ef, Nbd.STRUCTURED_REPLY_MAGIC);
        assertEquals(0x3e889045565a9L, Nbd.OPTION_REPLY_MAGIC);
        int[] commands = {Nbd.CMD_READ, Nbd.CMD_WRITE, Nbd.CMD_DISC, Nbd.CMD_FLUSH, Nbd.CMD_TRIM, Nbd.CMD_CACHE,
                Nbd.CMD_WRITE_ZEROES, Nbd.CMD_BLOCK_STATUS};
        assertArrayEquals(new int[]{0, 1, 2, 3, 4, 5, 6, 7}, commands);
        assertArrayEquals(new int[]{1, 2, 4, 8, 16}, new int[]{Nbd.CMD_FLAG_FUA, Nbd.CMD_FLAG_NO_HOLE,
                Nbd.CMD_FLAG_DF, Nbd.CMD_FLAG_REQ_ONE, Nbd.CMD_FLAG_FAST_ZERO});
        assertArrayEquals(new int[]{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}, new int[]{Nbd.FLAG_HAS_FLAGS,
                Nbd.FLAG_READ_ONLY, Nbd.FLAG_SEND_FLUSH, Nbd.FLAG_SEND_FUA, Nbd.FLAG_ROTATIONAL, Nbd.FLAG_SEND_TRIM,
                Nbd.FLAG_SEND_WRITE_ZEROES, Nbd.FLAG_SEND_DF, Nbd.FLAG_CAN_MULTI_CONN, Nbd.FLAG_SEND_RESIZE,
                Nbd.FLAG_SEND_CACHE, Nbd.FLAG_SEND_FAST_ZERO});
        assertArrayEquals(new int[]{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, new int[]{Nbd.OPT_EXPORT_NAME, Nbd.OPT_ABORT,
                Nbd.OPT_LIST, Nbd.OPT_PEEK_EXPORT, Nbd.OPT_STARTTLS, Nbd.OPT_INFO, Nbd.OPT_GO, Nbd.OPT_STRUCTURED_REPLY,
                Nbd.OPT_LIST_META_CONTEXT, Nbd.OPT_SET_META_CONTEXT, Nbd.OPT_EXTENDED_HEADERS});
        assertArrayEquals(new int[]{0x80000001, 0x80000002, 0x80000003, 0x80000004, 0x80000005, 0x80000006,
                0x80000007, 0x80000008, 0x80000009, 0x8000000a},
                new int[]{Nbd.REP_ERR_UNSUP, Nbd.REP_ERR_POLICY, Nbd.REP_ERR_INVALID, Nbd.REP_ERR_PLATFORM,
                        Nbd.REP_ERR_TLS_REQD, Nbd.REP_ERR_UNKNOWN, Nbd.REP_ERR_SHUTDOWN, Nbd.REP_ERR_BLOCK_SIZE_REQD,
                        Nbd.REP_ERR_TOO_BIG, Nbd.REP_ERR_EXT_HEADER_REQD});
        assertArrayEquals(new int[]{1, 2, 3, 4},
                new int[]{Nbd.REP_ACK, Nbd.REP_SERVER, Nbd.REP_INFO, Nbd.REP_META_CONTEXT});
        assertArrayEquals(new int[]{0, 1, 2, 5, 32769, 32770},
                new int[]{Nbd.REPLY_TYPE_NONE, Nbd.REPLY_TYPE_OFFSET_DATA,
                        Nbd.REPLY_TYPE_OFFSET_HOLE, Nbd.REPLY_TYPE_BLOCK_STATUS, Nbd.REPLY_TYPE_ERROR,
                        Nbd.REPLY_TYPE_ERROR_OFFSET});
        assertArrayEquals(new int[]{1, 5, 12, 22, 28, 75, 95, 108}, new int[]{Errno.EPERM.code(), Errno.EIO.code(),
                Errno.ENOMEM.code(), Errno.EINVAL.code(), Errno.ENOSPC.code(), Errno.EOVERFLOW.code(),
                Errno.ENOTSUP.code(), Errno.ESHUTDOWN.code()});
    }
}
