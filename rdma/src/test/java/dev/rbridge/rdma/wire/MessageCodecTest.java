package dev.rbridge.rdma.wire;

import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The control protocol's codec: every message in both directions against bytes built by hand field by field (so a
 * layout change of version 1 cannot slip through), encoded and decoded, fed whole, byte by byte, in random pieces and
 * cut at every position; WRITE and READ data left to the caller; malformed and oversized input refused with the
 * typed error before anything is allocated for it.
 */
class MessageCodecTest {
    static final long KEY = 0x0123_4567_89AB_CDEFL;
    static final RegionTag TAG = new RegionTag("vol-é", 3, 1, 7);
    static final RegionDescriptor REGION = new RegionDescriptor(42, 1 << 20, KEY, TAG);

    // ------------------------------------------------------------------------------------ hand-built bytes

    /** Little-endian fields, as version 1 lays them out; independent of the encoder under test. */
    static final class Bytes {
        final ByteArrayOutputStream out = new ByteArrayOutputStream();

        Bytes u8(int v) {
            out.write(v);
            return this;
        }

        Bytes u16(int v) {
            return u8(v).u8(v >>> 8);
        }

        Bytes u32(long v) {
            return u16((int) v).u16((int) (v >>> 16));
        }

        Bytes u64(long v) {
            return u32(v).u32(v >>> 32);
        }

        Bytes raw(byte[] b) {
            out.writeBytes(b);
            return this;
        }

        Bytes str(String s) {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            return u16(b.length).raw(b);
        }

        Bytes tag(RegionTag t) {
            return str(t.volume()).u64(t.slab()).u32(t.replica()).u64(t.generation());
        }

        Bytes descriptor(RegionDescriptor d) {
            return u64(d.id()).u64(d.length()).u64(d.key()).tag(d.tag());
        }

        byte[] bytes() {
            return out.toByteArray();
        }
    }

    /** A whole message: header (magic "RBRM", version, opcode, id, status, length) and body. */
    static byte[] message(int version, int opcode, long id, int status, byte[] body) {
        return new Bytes().raw("RBRM".getBytes(StandardCharsets.US_ASCII)).u16(version).u16(opcode).u64(id)
                .u32(status).u32(body.length).raw(body).bytes();
    }

    static byte[] message(int opcode, long id, Bytes body) {
        return message(1, opcode, id, 0, body.bytes());
    }

    static byte[] data(int n, int seed) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

    /** A message, its bytes on the wire (data included) and the data that follows it, if any. */
    record Case(Message message, byte[] wire, byte[] data) {
        Case(Message message, byte[] wire) {
            this(message, wire, null);
        }
    }

    static List<Case> requests() {
        byte[] five = data(5, 1);
        byte[] address = data(77, 3);
        return List.of(
                new Case(new Message.Hello(1, "secret", "bridge-a"),
                        message(1, 1, new Bytes().str("secret").str("bridge-a"))),
                new Case(new Message.Allocate(2, 1 << 20, TAG), message(2, 2, new Bytes().u64(1 << 20).tag(TAG))),
                new Case(new Message.Open(3, 42), message(3, 3, new Bytes().u64(42))),
                new Case(new Message.ListRegions(4), message(4, 4, new Bytes())),
                new Case(new Message.Release(5, 42, KEY), message(5, 5, new Bytes().u64(42).u64(KEY))),
                new Case(new Message.Retag(6, 42, KEY, TAG), message(6, 6, new Bytes().u64(42).u64(KEY).tag(TAG))),
                new Case(new Message.Lease(7, "vol", "owner-a", 30_000),
                        message(7, 7, new Bytes().str("vol").str("owner-a").u64(30_000).u64(0))),
                new Case(new Message.Lease(7, "vol", "owner-a", 30_000, 0x1122334455667788L),
                        message(7, 7, new Bytes().str("vol").str("owner-a").u64(30_000).u64(0x1122334455667788L))),
                new Case(new Message.Unlease(8, "vol", "owner-a"),
                        message(8, 8, new Bytes().str("vol").str("owner-a").u64(0))),
                new Case(new Message.Unlease(8, "vol", "owner-a", 77),
                        message(8, 8, new Bytes().str("vol").str("owner-a").u64(77))),
                new Case(new Message.Info(9), message(9, 9, new Bytes())),
                new Case(new Message.State(9), message(10, 9, new Bytes())),
                new Case(new Message.Read(10, 42, KEY, 4096, 65536),
                        message(16, 10, new Bytes().u64(42).u64(KEY).u64(4096).u32(65536))),
                new Case(new Message.Write(11, 42, KEY, 8192, 5),
                        message(17, 11, new Bytes().u64(42).u64(KEY).u64(8192).raw(five)), five),
                new Case(new Message.Write(12, 42, KEY, 0, 0), message(17, 12, new Bytes().u64(42).u64(KEY).u64(0))),
                new Case(new Message.Zero(13, 42, KEY, 4096, 1L << 33),
                        message(18, 13, new Bytes().u64(42).u64(KEY).u64(4096).u64(1L << 33))),
                new Case(new Message.Flush(14), message(19, 14, new Bytes())),
                new Case(new Message.UcxConnect(15, WireBytes.EMPTY), message(32, 15, new Bytes())),
                new Case(new Message.UcxConnect(15, WireBytes.of(address)),
                        message(32, 15, new Bytes().u32(address.length).raw(address))),
                new Case(new Message.MapRegion(16, 42, KEY, 1 << 20),
                        message(33, 16, new Bytes().u64(42).u64(KEY).u64(1 << 20))),
                new Case(new Message.InvalidateDone(17), message(34, 17, new Bytes())),
                new Case(new Message.UcxProbe(18), message(35, 18, new Bytes())));
    }

    static List<Case> replies() {
        byte[] seven = data(7, 2);
        byte[] address = data(77, 3);
        byte[] rkey = data(19, 4);
        List<RegionInfo> listed = List.of(new RegionInfo(new RegionDescriptor(42, 4096, 0, TAG), "bridge-a"),
                new RegionInfo(new RegionDescriptor(43, 8192, 0, RegionTag.scratch("ping")), ""));
        return List.of(
                new Case(new Message.HelloReply(1, "server-1", 1L << 40, 1L << 39),
                        message(1, 1, new Bytes().str("server-1").u64(1L << 40).u64(1L << 39))),
                new Case(new Message.AllocateReply(2, REGION), message(2, 2, new Bytes().descriptor(REGION))),
                new Case(new Message.OpenReply(3, REGION), message(3, 3, new Bytes().descriptor(REGION))),
                new Case(new Message.ListReply(4, listed), message(4, 4, new Bytes().u32(2)
                        .descriptor(listed.get(0).descriptor()).str("bridge-a")
                        .descriptor(listed.get(1).descriptor()).str(""))),
                new Case(new Message.ReleaseReply(5), message(5, 5, new Bytes())),
                new Case(new Message.RetagReply(6, REGION), message(6, 6, new Bytes().descriptor(REGION))),
                new Case(new Message.LeaseReply(7, 30_000, true, 2),
                        message(7, 7, new Bytes().u64(30_000).u8(1).u64(2))),
                new Case(new Message.LeaseReply(7, 5, false, 0), message(7, 7, new Bytes().u64(5).u8(0).u64(0))),
                new Case(new Message.LeaseReply(7, 5, false, 3, 12, 0x0102030405060708L, true),
                        message(7, 7, new Bytes().u64(5).u8(0).u64(3).u64(12).u64(0x0102030405060708L).u8(1))),
                new Case(new Message.LeaseReply(7, 5, true, 3, 13, 99, false),
                        message(7, 7, new Bytes().u64(5).u8(1).u64(3).u64(13).u64(99).u8(0))),
                new Case(new Message.UnleaseReply(8), message(8, 8, new Bytes())),
                new Case(new Message.InfoReply(9, "server-1", 100, 60),
                        message(9, 9, new Bytes().str("server-1").u64(100).u64(60))),
                new Case(new Message.StateReply(9, 1), message(10, 9, new Bytes().u32(1))),
                new Case(new Message.StateReply(9, 0), message(10, 9, new Bytes().u32(0))),
                new Case(new Message.ReadReply(10, 7), message(16, 10, new Bytes().raw(seven)), seven),
                new Case(new Message.ReadReply(10, 0), message(16, 10, new Bytes())),
                new Case(new Message.WriteReply(11), message(17, 11, new Bytes())),
                new Case(new Message.ZeroReply(13), message(18, 13, new Bytes())),
                new Case(new Message.FlushReply(14), message(19, 14, new Bytes())),
                new Case(new Message.UcxConnectReply(15, WireBytes.of(address)),
                        message(32, 15, new Bytes().u32(address.length).raw(address))),
                new Case(new Message.MapReply(16, 0x7F00_0000_1000L, 1 << 20, WireBytes.of(rkey)),
                        message(33, 16, new Bytes().u64(0x7F00_0000_1000L).u64(1 << 20).u32(rkey.length).raw(rkey))),
                new Case(new Message.UcxProbeReply(18, 0x7F00_0000_2000L, WireBytes.of(rkey)),
                        message(35, 18, new Bytes().u64(0x7F00_0000_2000L).u32(rkey.length).raw(rkey))),
                new Case(new Message.Invalidate(900, List.of(42L, 43L)),
                        message(34, 900, new Bytes().u32(2).u64(42).u64(43))),
                new Case(new Message.Error(18, 2, 6, "cannot grant"),
                        message(1, 2, 18, 6, new Bytes().str("cannot grant").bytes())),
                new Case(new Message.Error(0, 0, 1, "malformed message: bad magic"),
                        message(1, 0, 0, 1, new Bytes().str("malformed message: bad magic").bytes())),
                new Case(new Message.OtherVersion(1, 2), message(2, 1, 1, 0, new byte[0])));
    }

    // ------------------------------------------------------------------------------------ pinned bytes

    @Test
    void theHeaderOfVersionOneIsPinnedByteForByte() {
        // A READ of 65536 bytes at 4096 of region 42, request id 10: the literal bytes a v1 peer sends.
        assertEquals("5242524d" + "0100" + "1000" + "0a00000000000000" + "00000000" + "1c000000"
                + "2a00000000000000" + "efcdab8967452301" + "0010000000000000" + "00000100",
                HexFormat.of().formatHex(MessageEncoder.encode(new Message.Read(10, 42, KEY, 4096, 65536)).array()));
        // An error reply: status 4 (ACCESS_DENIED), a 2-byte string length, the reason.
        assertEquals("5242524d" + "0100" + "0300" + "0700000000000000" + "04000000" + "04000000" + "0200" + "6e6f",
                HexFormat.of().formatHex(MessageEncoder.encode(new Message.Error(7, 3, 4, "no")).array()));
    }

    @Test
    void everyMessageIsEncodedAsVersionOneLaysItOut() {
        for (Case c : all()) {
            ByteBuffer b = MessageEncoder.encode(c.message());
            byte[] expected = c.data() == null ? c.wire() : Arrays.copyOf(c.wire(), c.wire().length - c.data().length);
            assertArrayEquals(expected, Arrays.copyOf(b.array(), b.limit()), c.message().toString());
            assertEquals(expected.length, MessageEncoder.size(c.message()), c.message().toString());
            assertEquals(c.wire().length - Protocol.HEADER, MessageEncoder.bodyLength(c.message()),
                    c.message().toString());
            ByteBuffer into = ByteBuffer.allocate(expected.length + 8).order(ByteOrder.LITTLE_ENDIAN).position(8);
            assertEquals(expected.length, MessageEncoder.encode(c.message(), into), "bytes written");
            assertEquals(8 + expected.length, into.position());
        }
    }

    @Test
    void aListReplyWrittenPieceByPieceIsTheSameAsWhole() {
        Message.ListReply list = (Message.ListReply) replies().get(3).message();
        long length = MessageEncoder.listBodyLength(list.regions());
        ByteBuffer pieces = ByteBuffer.allocate(Protocol.HEADER + (int) length).order(ByteOrder.LITTLE_ENDIAN);
        MessageEncoder.listReplyStart(pieces, list.id(), list.regions().size(), (int) length);
        for (RegionInfo r : list.regions()) {
            assertEquals(MessageEncoder.listEntrySize(r), MessageEncoder.size(new Message.ListReply(0, List.of(r)))
                    - Protocol.HEADER - 4);
            MessageEncoder.listEntry(pieces, r);
        }
        assertArrayEquals(MessageEncoder.encode(list).array(), pieces.array());
    }

    static List<Case> all() {
        List<Case> all = new ArrayList<>(requests());
        all.addAll(replies());
        return all;
    }

    // ------------------------------------------------------------------------------------ feeding

    /** What a decoder gave: messages, and the data after them as moved by the caller. */
    static List<Object> feed(MessageDecoder d, byte[] stream, int[] cuts) throws MalformedMessageException {
        List<Object> out = new ArrayList<>();
        ByteArrayOutputStream data = null;
        int from = 0;
        for (int to : cuts) {
            ByteBuffer in = ByteBuffer.wrap(Arrays.copyOfRange(stream, from, to)).order(ByteOrder.LITTLE_ENDIAN);
            from = to;
            while (true) {
                if (d.payloadRemaining() > 0) {
                    int n = Math.min(in.remaining(), d.payloadRemaining());
                    data.write(in.array(), in.position(), n);
                    in.position(in.position() + n);
                    d.payloadMoved(n);
                    if (d.payloadRemaining() > 0) {
                        break;
                    }
                    out.add(ByteBuffer.wrap(data.toByteArray()));
                    data = null;
                    continue;
                }
                int before = in.position();
                Message m = d.next(in);
                if (m == null) {
                    assertFalse(in.hasRemaining(), "a decoder that returns nothing consumes all its input");
                    break;
                }
                assertTrue(in.position() >= before);
                out.add(m);
                if (d.payloadRemaining() > 0) {
                    data = new ByteArrayOutputStream();
                }
            }
        }
        assertEquals(stream.length, from);
        assertTrue(d.atBoundary(), "at a message boundary after the last message");
        return out;
    }

    static List<Object> expected(List<Case> cases) {
        List<Object> out = new ArrayList<>();
        for (Case c : cases) {
            out.add(c.message());
            if (c.data() != null) {
                out.add(ByteBuffer.wrap(c.data()));
            }
        }
        return out;
    }

    static byte[] stream(List<Case> cases) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        cases.forEach(c -> out.writeBytes(c.wire()));
        return out.toByteArray();
    }

    static int[] whole(int n) {
        return new int[]{n};
    }

    static int[] byteByByte(int n) {
        int[] cuts = new int[n];
        for (int i = 0; i < n; i++) {
            cuts[i] = i + 1;
        }
        return cuts;
    }

    static int[] splitAt(int p, int n) {
        return new int[]{p, n};
    }

    static int[] randomPieces(int n, long seed) {
        Random r = new Random(seed);
        List<Integer> cuts = new ArrayList<>();
        for (int at = 0; at < n;) {
            at = Math.min(n, at + 1 + r.nextInt(r.nextBoolean() ? 8 : 80));
            cuts.add(at);
        }
        return cuts.stream().mapToInt(Integer::intValue).toArray();
    }

    /** Every way of splitting the stream a test uses: whole, byte by byte, at every position, random pieces. */
    static void decodesTheSameHoweverSplit(java.util.function.Supplier<MessageDecoder> decoder, List<Case> cases)
            throws MalformedMessageException {
        byte[] stream = stream(cases);
        List<Object> expected = expected(cases);
        int n = stream.length;
        assertEquals(expected, feed(decoder.get(), stream, whole(n)), "whole");
        assertEquals(expected, feed(decoder.get(), stream, byteByByte(n)), "byte by byte");
        for (int p = 0; p <= n; p++) {
            assertEquals(expected, feed(decoder.get(), stream, splitAt(p, n)), "cut at " + p);
        }
        for (long seed = 1; seed <= 50; seed++) {
            assertEquals(expected, feed(decoder.get(), stream, randomPieces(n, seed)), "random pieces, seed " + seed);
        }
    }

    @Test
    void everyRequestDecodesHoweverTheBytesArrive() throws Exception {
        decodesTheSameHoweverSplit(MessageDecoder::forMemserver, requests());
    }

    @Test
    void everyReplyDecodesHoweverTheBytesArrive() throws Exception {
        decodesTheSameHoweverSplit(MessageDecoder::forClient, replies());
    }

    @Test
    void aLeaseRequestFromAClientThatPredatesLeaseIdsPresentsNone() throws Exception {
        decodesTheSameHoweverSplit(MessageDecoder::forMemserver, List.of(
                new Case(new Message.Hello(1, "secret", "old"), message(1, 1, new Bytes().str("secret").str("old"))),
                new Case(new Message.Lease(9, "vol", "old", 5, Lease.NO_ID),
                        message(7, 9, new Bytes().str("vol").str("old").u64(5))),
                new Case(new Message.Unlease(10, "vol", "old", Lease.NO_ID),
                        message(8, 10, new Bytes().str("vol").str("old")))));
    }

    @Test
    void aLeaseReplyFromAMemserverThatPredatesTheOwnerChangeCountReadsAsUnknown() throws Exception {
        decodesTheSameHoweverSplit(MessageDecoder::forClient, List.of(
                new Case(new Message.LeaseReply(9, 5, true, Lease.UNKNOWN_OWNER_CHANGES),
                        message(7, 9, new Bytes().u64(5).u8(1))),
                new Case(new Message.LeaseReply(10, 5, false, Lease.UNKNOWN_OWNER_CHANGES),
                        message(7, 10, new Bytes().u64(5).u8(0)))));
    }

    @Test
    void whatTheEncoderWritesTheDecoderReadsBack() throws Exception {
        for (List<Case> cases : List.of(requests(), replies())) {
            boolean requests = cases.getFirst().message() instanceof Message.Hello;
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            for (Case c : cases) {
                out.writeBytes(MessageEncoder.encode(c.message()).array());
                if (c.data() != null) {
                    out.writeBytes(c.data());
                }
            }
            MessageDecoder d = requests ? MessageDecoder.forMemserver() : MessageDecoder.forClient();
            assertEquals(expected(cases), feed(d, out.toByteArray(), whole(out.size())));
        }
    }

    // ------------------------------------------------------------------------------------ framed, unreadable

    @Test
    void requestsThatCannotBeReadAreConsumedAndTheStreamGoesOn() throws Exception {
        byte[] junk = data(300, 5);
        List<Case> cases = List.of(
                requests().getFirst(),
                new Case(new Message.Unreadable(20, 99, "unexpected OP_99"), message(1, 99, 20, 0, junk)),
                new Case(new Message.Unreadable(21, 18, "ZERO body must be 32 bytes, was 40"),
                        message(18, 21, new Bytes().u64(1).u64(2).u64(3).u64(4).u64(5))),
                new Case(new Message.Unreadable(22, 16, "READ body must be 28 bytes, was 24"),
                        message(16, 22, new Bytes().u64(1).u64(2).u64(3))),
                new Case(new Message.Unreadable(23, 16, "READ of 16777217 bytes exceeds 16777216"),
                        message(16, 23, new Bytes().u64(1).u64(2).u64(3).u32(Protocol.MAX_DATA + 1))),
                new Case(new Message.Unreadable(24, 16, "READ of 4294967295 bytes exceeds 16777216"),
                        message(16, 24, new Bytes().u64(1).u64(2).u64(3).u32(-1))),
                new Case(new Message.Unreadable(25, 19, "FLUSH body must be 0 bytes, was 3"),
                        message(19, 25, new Bytes().u8(1).u8(2).u8(3))),
                new Case(new Message.Unreadable(30, 17, "WRITE of 23 bytes has no room for its address"),
                        message(17, 30, new Bytes().raw(new byte[23]))),
                new Case(new Message.Unreadable(26, 2, "ALLOCATE body is malformed (a string of 200 bytes overruns "
                        + "it)"), message(2, 26, new Bytes().u64(4096).u16(200).raw(new byte[10]))),
                new Case(new Message.Unreadable(27, 2, "ALLOCATE body is malformed (truncated)"),
                        message(2, 27, new Bytes().u32(7))),
                new Case(new Message.Unreadable(28, 2, "ALLOCATE body is malformed (volume name longer than 255 "
                        + "bytes)"), message(2, 28, new Bytes().raw(longVolumeAllocate()))),
                new Case(new Message.Flush(29), message(19, 29, new Bytes())));
        decodesTheSameHoweverSplit(MessageDecoder::forMemserver, cases);
    }

    @Test
    void aWriteCarryingMoreThanMaxDataIsConsumedAsUnreadable() throws Exception {
        // Within the body bound (MAX_BODY) but past the data bound: found by the fuzzer (MessageDecoderFuzzTest).
        int data = Protocol.MAX_DATA + 1;
        byte[] body = new byte[Protocol.DATA_ADDRESS + data];
        List<Case> cases = List.of(requests().getFirst(),
                new Case(new Message.Unreadable(31, 17, "WRITE of " + data + " bytes of data (at most "
                        + Protocol.MAX_DATA + ")"), message(17, 31, new Bytes().raw(body))),
                new Case(new Message.Flush(32), message(19, 32, new Bytes())));
        byte[] stream = stream(cases);
        assertEquals(expected(cases), feed(MessageDecoder.forMemserver(), stream, whole(stream.length)));
        assertEquals(expected(cases), feed(MessageDecoder.forMemserver(), stream, randomPieces(stream.length, 7)));
    }

    /** An ALLOCATE whose volume name is one byte longer than a tag allows. */
    static byte[] longVolumeAllocate() {
        byte[] name = new byte[RegionTag.MAX_VOLUME_NAME + 1];
        Arrays.fill(name, (byte) 'v');
        return new Bytes().u64(4096).u16(name.length).raw(name).u64(0).u32(0).u64(0).bytes();
    }

    @Test
    void repliesThatCannotBeReadAreConsumedAndTheStreamGoesOn() throws Exception {
        List<Case> cases = List.of(
                new Case(new Message.Unreadable(3, 77, "a reply of unknown opcode OP_77"),
                        message(77, 3, new Bytes().u64(1))),
                new Case(new Message.Unreadable(4, 4, "reply to LIST body is malformed (it claims 1000 regions in 0 "
                        + "bytes)"), message(4, 4, new Bytes().u32(1000))),
                new Case(new Message.WriteReply(5), message(17, 5, new Bytes().u32(9))), // a body it does not need
                new Case(new Message.FlushReply(6), message(19, 6, new Bytes())));
        decodesTheSameHoweverSplit(MessageDecoder::forClient, cases);
    }

    @Test
    void aRefusedWritesDataIsSkippedAndTheNextRequestDecodes() throws Exception {
        byte[] data = data(5000, 6);
        byte[] stream = new Bytes().raw(message(1, 1, new Bytes().str("t").str("c")))
                .raw(message(17, 2, new Bytes().u64(1).u64(2).u64(3).raw(data)))
                .raw(message(19, 3, new Bytes())).bytes();
        for (int[] cuts : List.of(whole(stream.length), byteByByte(stream.length), randomPieces(stream.length, 3))) {
            MessageDecoder d = MessageDecoder.forMemserver();
            List<Message> got = new ArrayList<>();
            int from = 0;
            for (int to : cuts) {
                ByteBuffer in = ByteBuffer.wrap(stream, from, to - from).order(ByteOrder.LITTLE_ENDIAN);
                from = to;
                Message m;
                while ((m = d.next(in)) != null) {
                    got.add(m);
                    if (m instanceof Message.Write) {
                        assertEquals(5000, d.payloadRemaining());
                        d.skipPayload();
                        assertEquals(0, d.payloadRemaining());
                    }
                }
            }
            assertEquals(List.of(new Message.Hello(1, "t", "c"), new Message.Write(2, 1, 2, 3, 5000),
                    new Message.Flush(3)), got);
        }
    }

    @Test
    void aDecoderWithDataDueRefusesToReadOn() throws Exception {
        MessageDecoder d = MessageDecoder.forClient();
        ByteBuffer in = ByteBuffer.wrap(message(16, 1, new Bytes().raw(new byte[10]))).order(ByteOrder.LITTLE_ENDIAN);
        assertEquals(new Message.ReadReply(1, 10), d.next(in));
        assertEquals(10, in.remaining(), "the data is left where it is");
        assertThrows(IllegalStateException.class, () -> d.next(in));
        assertThrows(IllegalStateException.class, () -> d.payloadMoved(11));
        d.payloadMoved(4);
        d.payloadMoved(6);
        assertTrue(d.atBoundary());
    }

    // ------------------------------------------------------------------------------------ malformed

    static MalformedMessageException malformed(MessageDecoder d, byte[] bytes) {
        ByteBuffer in = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        return assertThrows(MalformedMessageException.class, () -> {
            while (d.next(in) != null) {
                // messages before the malformed one
            }
        });
    }

    static byte[] hello() {
        return message(1, 1, new Bytes().str("t").str("c"));
    }

    static byte[] concat(byte[]... parts) {
        Bytes b = new Bytes();
        for (byte[] p : parts) {
            b.raw(p);
        }
        return b.bytes();
    }

    static byte[] header(int version, int opcode, long id, int status, int length) {
        return new Bytes().raw("RBRM".getBytes(StandardCharsets.US_ASCII)).u16(version).u16(opcode).u64(id)
                .u32(status).u32(length).bytes();
    }

    @Test
    void framingErrorsAreMalformedAndNameTheProblem() {
        record Bad(boolean memserver, byte[] bytes, String says) {
        }
        for (Bad b : List.of(
                new Bad(true, "GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(StandardCharsets.US_ASCII), "bad magic"),
                new Bad(true, header(1, 2, 1, 0, 8), "expected HELLO or AUTH first, got ALLOCATE"),
                new Bad(true, header(1, 99, 1, 0, 0), "expected HELLO or AUTH first, got OP_99"),
                new Bad(true, header(1, 37, 1, 0, 4), "expected HELLO or AUTH first, got AUTH_PROOF"),
                new Bad(true, concat(message(36, 1, new Bytes().str("c").u32(2).raw(new byte[2])),
                        header(1, 4, 2, 0, 0)), "expected AUTH_PROOF after AUTH, got LIST"),
                new Bad(true, concat(message(36, 1, new Bytes().str("c").u32(2).raw(new byte[2])),
                        header(1, 37, 2, 0, Protocol.MAX_HELLO_BODY + 1)), "AUTH_PROOF of 4097 bytes"),
                new Bad(true, header(1, 1, 1, 0, Protocol.MAX_HELLO_BODY + 1), "HELLO of 4097 bytes (at most 4096)"),
                new Bad(true, message(1, 1, new Bytes().u16(50).raw(new byte[4])), "HELLO body is malformed"),
                new Bad(true, header(1, 1, 1, 0, -1), "body length 4294967295 exceeds"),
                new Bad(true, concat(hello(), header(2, 19, 2, 0, 0)), "protocol version changed to 2 mid-stream"),
                new Bad(true, concat(hello(), header(1, 2, 2, 0, Protocol.MAX_CONTROL_BODY + 1)),
                        "ALLOCATE of 65537 bytes"),
                new Bad(true, concat(hello(), header(1, 1, 2, 0, Protocol.MAX_BODY + 1)), "exceeds"),
                new Bad(false, header(1, 16, 1, 0, Protocol.MAX_DATA + 1), "READ reply of 16777217 bytes"),
                new Bad(false, header(1, 2, 1, 3, Protocol.MAX_CONTROL_BODY + 1), "error reply of 65537 bytes"),
                new Bad(false, header(1, 9, 1, 0, Protocol.MAX_CONTROL_BODY + 1), "INFO reply of 65537 bytes"),
                new Bad(false, header(1, 1, 1, 0, Protocol.MAX_CONTROL_BODY + 1), "HELLO reply of 65537 bytes"),
                new Bad(false, "HTTP/1.1 400 Bad Request\r\n\r\n".getBytes(StandardCharsets.US_ASCII), "bad magic"))) {
            MessageDecoder d = b.memserver() ? MessageDecoder.forMemserver() : MessageDecoder.forClient();
            MalformedMessageException e = malformed(d, b.bytes());
            assertTrue(e.getMessage().contains(b.says()), "'" + e.getMessage() + "' should say " + b.says());
        }
    }

    /**
     * The greeting that proves the token: AUTH (name, nonce), AUTH_PROOF (proof), and their replies, byte by byte; the
     * greeting is over once the proof is read, and what follows is served.
     */
    @Test
    void theAuthGreetingRoundTripsByteByByte() throws Exception {
        byte[] nonce = data(32, 7);
        byte[] proof = data(32, 9);
        byte[] stream = concat(message(36, 1, new Bytes().str("bridge-a").u32(32).raw(nonce)),
                message(37, 2, new Bytes().u32(32).raw(proof)), message(4, 3, new Bytes()));
        MessageDecoder d = MessageDecoder.forMemserver();
        assertEquals(List.of(new Message.AuthStart(1, "bridge-a", WireBytes.of(nonce)),
                new Message.AuthProof(2, WireBytes.of(proof)), new Message.ListRegions(3)),
                feed(d, stream, byteByByte(stream.length)));
        assertFalse(d.awaitingHello());
        assertArrayEquals(stream, concat(MessageEncoder.encode(new Message.AuthStart(1, "bridge-a",
                WireBytes.of(nonce))).array(), MessageEncoder.encode(
                        new Message.AuthProof(2,
                                WireBytes.of(proof)))
                        .array(),
                MessageEncoder.encode(new Message.ListRegions(3)).array()));

        byte[] replies = concat(message(36, 1, new Bytes().u32(32).raw(nonce)),
                message(37, 2, new Bytes().str("srv").u64(1 << 30).u64(1 << 20).u32(32).raw(proof)));
        assertEquals(List.of(new Message.AuthChallenge(1, WireBytes.of(nonce)),
                new Message.AuthWelcome(2, "srv", 1 << 30, 1 << 20, WireBytes.of(proof))),
                feed(MessageDecoder.forClient(), replies, byteByByte(replies.length)));
        assertEquals("AuthProof[id=2, proof=WireBytes[length=32]]", new Message.AuthProof(2, WireBytes.of(proof))
                .toString(), "a proof is shown by its length only");
    }

    @Test
    void aHelloOfAnotherVersionIsSkippedUnreadAndReported() throws Exception {
        byte[] stream = message(2, 1, 5, 0, new byte[]{1, 2, 3, 4, 5, 6, 7}); // a v2 layout this build cannot know
        assertEquals(List.of(new Message.OtherVersion(5, 2)), feed(MessageDecoder.forMemserver(), stream,
                byteByByte(stream.length)));
        MessageDecoder d = MessageDecoder.forMemserver();
        assertTrue(d.awaitingHello());
        feed(d, hello(), whole(hello().length));
        assertFalse(d.awaitingHello(), "the greeting is over once a HELLO is read");
    }

    /** Bytes allocated by this thread while {@code r} runs. */
    static long allocatedBy(ThrowingRunnable r) throws Exception {
        com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        long before = threads.getCurrentThreadAllocatedBytes();
        r.run();
        return threads.getCurrentThreadAllocatedBytes() - before;
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    @Test
    void oversizedClaimsAreRefusedBeforeAnythingIsAllocatedForThem() throws Exception {
        // Warm up the paths, so the class loading and JIT of a first run do not count.
        for (int i = 0; i < 3; i++) {
            malformed(MessageDecoder.forMemserver(), header(1, 1, 1, 0, Integer.MAX_VALUE));
            malformed(MessageDecoder.forMemserver(), concat(hello(), header(1, 3, 2, 0, 1 << 20)));
            malformed(MessageDecoder.forClient(), header(1, 4, 1, 0, Protocol.MAX_BODY + 1));
        }
        for (byte[] claim : List.of(header(1, 1, 1, 0, Integer.MAX_VALUE), header(1, 1, 1, 0, 1 << 20),
                header(1, 2, 1, 0, 1 << 20), concat(hello(), header(1, 3, 2, 0, 1 << 20)),
                concat(hello(), header(1, 2, 2, 0, Protocol.MAX_BODY)))) {
            MessageDecoder d = MessageDecoder.forMemserver();
            long bytes = allocatedBy(() -> malformed(d, claim));
            assertTrue(bytes < 64 << 10, "refusing a claim allocated " + bytes + " bytes");
        }
        for (byte[] claim : List.of(header(1, 4, 1, 0, Protocol.MAX_BODY + 1), header(1, 2, 1, 9, 1 << 20),
                header(1, 16, 1, 0, Protocol.MAX_DATA + 1))) {
            MessageDecoder d = MessageDecoder.forClient();
            long bytes = allocatedBy(() -> malformed(d, claim));
            assertTrue(bytes < 64 << 10, "refusing a claim allocated " + bytes + " bytes");
        }
    }

    @Test
    void theBodyOfAnUnknownOpcodeOrARefusedWriteIsDroppedAsItComesNotBuffered() throws Exception {
        MessageDecoder d = MessageDecoder.forMemserver();
        feed(d, hello(), whole(hello().length));
        int size = 8 << 20;
        ByteBuffer chunk = ByteBuffer.allocate(64 << 10).order(ByteOrder.LITTLE_ENDIAN);
        long bytes = allocatedBy(() -> {
            assertNull(d.next(ByteBuffer.wrap(header(1, 99, 7, 0, size)).order(ByteOrder.LITTLE_ENDIAN)));
            Message m = null;
            for (int left = size; left > 0; left -= chunk.capacity()) {
                chunk.clear();
                m = d.next(chunk);
            }
            assertEquals(new Message.Unreadable(7, 99, "unexpected OP_99"), m);
            ByteBuffer write = ByteBuffer.wrap(concat(header(1, 17, 8, 0, Protocol.DATA_ADDRESS + size),
                    new byte[Protocol.DATA_ADDRESS])).order(ByteOrder.LITTLE_ENDIAN);
            assertEquals(new Message.Write(8, 0, 0, 0, size), d.next(write));
            d.skipPayload();
            for (int left = size; left > 0; left -= chunk.capacity()) {
                assertNull(d.next(chunk.clear()));
            }
            assertTrue(d.atBoundary());
        });
        assertTrue(bytes < 1 << 20, "dropping 16 MiB allocated " + bytes + " bytes");
    }
}
