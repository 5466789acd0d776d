package dev.rbridge.nbd.server;

import dev.rbridge.nbd.protocol.Errno;
import dev.rbridge.nbd.protocol.Nbd;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Random;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The server against a byte-level client: every bad input gets its specified answer, and a session that breaks the
 * protocol ends alone while others keep being served.
 */
@Timeout(60)
class ServerProtocolTest {
    static TestServer ts;

    @BeforeAll
    static void start() throws IOException {
        ts = TestServer.start();
    }

    @AfterAll
    static void stop() throws IOException {
        ts.close();
    }

    private static byte[] random(int n, long seed) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

    /** Asserts that a connection in transmission still writes and reads correctly. */
    private static void assertServes(RawClient c, long handle) throws IOException {
        byte[] data = random(8192, handle);
        c.request(0, Nbd.CMD_WRITE, handle, 1 << 20, data.length, data);
        c.request(0, Nbd.CMD_READ, handle + 1, 1 << 20, data.length, null);
        c.flush();
        if (c.structured) {
            assertEquals(0, c.readSimple(0).error());
            RawClient.Chunk chunk = c.readChunk();
            assertEquals(Nbd.REPLY_TYPE_OFFSET_DATA, chunk.type());
            assertArrayEquals(data, Arrays.copyOfRange(chunk.payload(), 8, chunk.payload().length));
        } else {
            RawClient.SimpleReply w = c.readSimple(0);
            assertEquals(0, w.error());
            RawClient.SimpleReply r = c.readSimple(data.length);
            assertEquals(handle + 1, r.handle());
            assertArrayEquals(data, r.data());
        }
    }

    // ------------------------------------------------------------------------------------------------ handshake

    @Test
    void optionsTheServerDoesNotOfferGetTheirErrors() throws IOException {
        try (RawClient c = RawClient.connect(ts.server).hello()) {
            assertEquals(Nbd.REP_ERR_UNSUP, c.option(Nbd.OPT_STARTTLS, new byte[0]).type());
            assertEquals(Nbd.REP_ERR_UNSUP, c.option(Nbd.OPT_EXTENDED_HEADERS, new byte[0]).type());
            RawClient.OptionReply unknown = c.option(4242, new byte[]{1, 2, 3});
            assertEquals(Nbd.REP_ERR_UNSUP, unknown.type());
            assertEquals(4242, unknown.option());
            assertTrue(new String(unknown.data(), StandardCharsets.UTF_8).contains("not supported"));
            // the session is still usable after all that
            assertEquals(Nbd.REP_ACK, c.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type());
        }
    }

    @Test
    void badOptionLengthsAndNamesGetErrorRepliesNotADroppedConnection() throws IOException {
        try (RawClient c = RawClient.connect(ts.server).hello()) {
            assertEquals(Nbd.REP_ERR_INVALID, c.option(Nbd.OPT_LIST, new byte[]{0}).type());
            byte[] overrun = ByteBuffer.allocate(8).putInt(100).putShort((short) 0).array();
            assertEquals(Nbd.REP_ERR_INVALID, c.option(Nbd.OPT_INFO, overrun).type());
            byte[] badCount = RawClient.infoData("disk", Nbd.INFO_NAME);
            badCount[badCount.length - 3] = 5; // claims five requests, carries one
            assertEquals(Nbd.REP_ERR_INVALID, c.option(Nbd.OPT_GO, badCount).type());
            byte[] notUtf8 = ByteBuffer.allocate(8).putInt(2).put((byte) 0xC3).put((byte) 0x28).putShort((short) 0)
                    .array();
            assertEquals(Nbd.REP_ERR_INVALID, c.option(Nbd.OPT_GO, notUtf8).type());
            assertEquals(Nbd.REP_ERR_TOO_BIG, c.option(Nbd.OPT_GO, new byte[70_000]).type());
            RawClient.OptionReply unknown = c.option(Nbd.OPT_INFO, RawClient.infoData("nope"));
            assertEquals(Nbd.REP_ERR_UNKNOWN, unknown.type());
            assertTrue(new String(unknown.data(), StandardCharsets.UTF_8).contains("'disk'"),
                    "error names the exports that exist");
            assertEquals(Nbd.REP_ERR_INVALID, c.option(Nbd.OPT_LIST_META_CONTEXT,
                    RawClient.metaData("disk", "base:allocation")).type(), "meta contexts need structured replies");
            assertEquals(Nbd.REP_ACK, c.option(Nbd.OPT_GO, RawClient.infoData("disk")).type());
            c.structured = false;
            assertServes(c, 10);
        }
    }

    @Test
    void infoReportsSizeFlagsNameDescriptionAndBlockSizes() throws IOException {
        try (RawClient c = RawClient.connect(ts.server).hello()) {
            c.sendOption(Nbd.OPT_INFO, RawClient.infoData("small", Nbd.INFO_NAME, Nbd.INFO_DESCRIPTION,
                    Nbd.INFO_BLOCK_SIZE));
            Set<Integer> seen = new HashSet<>();
            RawClient.OptionReply r;
            while ((r = c.readOptionReply()).type() == Nbd.REP_INFO) {
                ByteBuffer b = ByteBuffer.wrap(r.data());
                int info = b.getShort();
                seen.add(info);
                switch (info) {
                    case Nbd.INFO_EXPORT -> {
                        assertEquals(16 << 20, b.getLong());
                        int flags = Short.toUnsignedInt(b.getShort());
                        assertTrue((flags & Nbd.FLAG_CAN_MULTI_CONN) != 0);
                        assertTrue((flags & Nbd.FLAG_SEND_TRIM) != 0);
                        assertEquals(0, flags & Nbd.FLAG_READ_ONLY);
                        assertEquals(0, flags & Nbd.FLAG_SEND_DF, "DF only with structured replies");
                    }
                    case Nbd.INFO_NAME -> assertEquals("small", StandardCharsets.UTF_8.decode(b).toString());
                    case Nbd.INFO_DESCRIPTION -> assertEquals("16 MiB, 1 MiB payloads",
                            StandardCharsets.UTF_8.decode(b).toString());
                    case Nbd.INFO_BLOCK_SIZE -> {
                        assertEquals(1, b.getInt());
                        assertEquals(4096, b.getInt());
                        assertEquals(1 << 20, b.getInt());
                    }
                    default -> throw new AssertionError("unexpected info " + info);
                }
            }
            assertEquals(Nbd.REP_ACK, r.type());
            assertEquals(Set.of(Nbd.INFO_EXPORT, Nbd.INFO_NAME, Nbd.INFO_DESCRIPTION, Nbd.INFO_BLOCK_SIZE), seen);
        }
    }

    @Test
    void listAndMetaContextQueries() throws IOException {
        try (RawClient c = RawClient.connect(ts.server).hello()) {
            c.sendOption(Nbd.OPT_LIST, new byte[0]);
            Set<String> names = new HashSet<>();
            RawClient.OptionReply r;
            while ((r = c.readOptionReply()).type() == Nbd.REP_SERVER) {
                ByteBuffer b = ByteBuffer.wrap(r.data());
                byte[] name = new byte[b.getInt()];
                b.get(name);
                names.add(new String(name, StandardCharsets.UTF_8));
            }
            assertEquals(Nbd.REP_ACK, r.type());
            assertEquals(Set.of("disk", "small", "ro", "aligned"), names);

            assertEquals(Nbd.REP_ACK, c.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type());
            c.sendOption(Nbd.OPT_LIST_META_CONTEXT, RawClient.metaData("disk"));
            RawClient.OptionReply ctx = c.readOptionReply();
            assertEquals(Nbd.REP_META_CONTEXT, ctx.type());
            assertEquals(Nbd.CONTEXT_BASE_ALLOCATION, new String(ctx.data(), 4, ctx.data().length - 4,
                    StandardCharsets.UTF_8));
            assertEquals(Nbd.REP_ACK, c.readOptionReply().type());
            // another namespace matches nothing: just the ACK
            assertEquals(Nbd.REP_ACK, c.option(Nbd.OPT_SET_META_CONTEXT, RawClient.metaData("disk", "x-other:thing"))
                    .type());
            assertEquals(Nbd.REP_ERR_INVALID, c.option(Nbd.OPT_SET_META_CONTEXT, RawClient.metaData("disk", "nocolon"))
                    .type());
            assertEquals(Nbd.REP_ERR_UNKNOWN, c.option(Nbd.OPT_SET_META_CONTEXT,
                    RawClient.metaData("nope", "base:")).type());
        }
    }

    @Test
    void exportNameForAnUnknownExportClosesAndAbortIsAcknowledged() throws IOException {
        try (RawClient c = RawClient.connect(ts.server).hello()) {
            c.sendOption(Nbd.OPT_EXPORT_NAME, "nope".getBytes(StandardCharsets.UTF_8));
            assertTrue(c.closedByServer());
        }
        try (RawClient c = RawClient.connect(ts.server).hello()) {
            c.sendOption(Nbd.OPT_ABORT, new byte[0]);
            assertEquals(Nbd.REP_ACK, c.readOptionReply().type());
            assertTrue(c.closedByServer());
        }
    }

    @Test
    void exportNameEntersTransmissionWithoutTheZeroPadWhenNegotiated() throws IOException {
        try (RawClient c = RawClient.connect(ts.server).hello()) {
            c.sendOption(Nbd.OPT_EXPORT_NAME, new byte[0]); // the default export
            assertEquals(1L << 30, c.in.readLong());
            int flags = c.in.readUnsignedShort();
            assertTrue((flags & Nbd.FLAG_HAS_FLAGS) != 0);
            assertServes(c, 20); // would misframe if the 124 zero bytes had been sent
        }
    }

    @Test
    void garbageDuringHandshakeEndsOnlyThatSession() throws IOException {
        try (RawClient good = RawClient.connect(ts.server); RawClient bad = RawClient.connect(ts.server).hello()) {
            good.go("disk", false, false);
            bad.out.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
            bad.flush();
            assertTrue(bad.closedByServer());
            assertServes(good, 30);
        }
        try (RawClient good = RawClient.connect(ts.server); RawClient bad = RawClient.connect(ts.server)) {
            good.go("disk", true, false);
            bad.in.readFully(new byte[18]);
            bad.out.writeInt(0xFFFF_FFFF); // client flags the server never offered
            bad.flush();
            assertTrue(bad.closedByServer());
            assertServes(good, 40);
        }
    }

    @Test
    void garbageDuringTransmissionEndsOnlyThatSession() throws IOException {
        try (RawClient good = RawClient.connect(ts.server); RawClient bad = RawClient.connect(ts.server)) {
            good.go("disk", true, false);
            bad.go("disk", false, false);
            bad.out.write(random(4096, 7));
            bad.flush();
            assertTrue(bad.closedByServer());
            assertServes(good, 50);
        }
    }

    @Test
    void outOfRangeRequestsGetEinvalOrEnospcAndTheSessionGoesOn() throws IOException {
        for (boolean structured : new boolean[]{false, true}) {
            try (RawClient c = RawClient.connect(ts.server)) {
                long size = c.go("small", structured, false).size();
                c.request(0, Nbd.CMD_READ, 1, size - 10, 20, null);
                c.request(0, Nbd.CMD_WRITE, 2, size - 10, 20, new byte[20]);
                c.request(0, Nbd.CMD_READ, 3, -1L, 1, null); // offset 2^64-1
                c.request(0, Nbd.CMD_TRIM, 4, size, 1, null);
                c.request(0, Nbd.CMD_WRITE_ZEROES, 5, Long.MAX_VALUE, 4096, null);
                c.request(0, Nbd.CMD_CACHE, 6, size + 4096, 4096, null);
                c.flush();
                int[] expected = {Errno.EINVAL.code(), Errno.ENOSPC.code(), Errno.EINVAL.code(), Errno.ENOSPC.code(),
                        Errno.ENOSPC.code(), Errno.EINVAL.code()};
                for (int i = 0; i < expected.length; i++) {
                    if (structured) {
                        RawClient.Chunk e = c.readChunk();
                        assertEquals(Nbd.REPLY_TYPE_ERROR, e.type());
                        assertTrue(e.done());
                        assertEquals(i + 1, e.handle());
                        assertEquals(expected[i], e.errorCode());
                        assertTrue(e.errorMessage().contains("beyond the end"), e.errorMessage());
                    } else {
                        RawClient.SimpleReply r = c.readSimple(0);
                        assertEquals(i + 1, r.handle());
                        assertEquals(expected[i], r.error());
                    }
                }
                assertServes(c, 60);
            }
        }
    }

    @Test
    void readOnlyUnknownCommandsBadFlagsAndAlignment() throws IOException {
        try (RawClient c = RawClient.connect(ts.server)) {
            int flags = c.go("ro", false, false).flags();
            assertTrue((flags & Nbd.FLAG_READ_ONLY) != 0);
            c.request(0, Nbd.CMD_WRITE, 1, 0, 4, new byte[4]);
            c.request(0, Nbd.CMD_TRIM, 2, 0, 4096, null);
            c.request(0, Nbd.CMD_WRITE_ZEROES, 3, 0, 4096, null);
            c.request(0, 99, 4, 0, 0, null);
            c.request(Nbd.CMD_FLAG_REQ_ONE, Nbd.CMD_READ, 5, 0, 512, null);
            c.request(0, Nbd.CMD_READ, 6, 0, 512, null);
            c.flush();
            assertEquals(Errno.EPERM.code(), c.readSimple(0).error());
            assertEquals(Errno.EPERM.code(), c.readSimple(0).error());
            assertEquals(Errno.EPERM.code(), c.readSimple(0).error());
            assertEquals(Errno.EINVAL.code(), c.readSimple(0).error());
            assertEquals(Errno.EINVAL.code(), c.readSimple(0).error());
            RawClient.SimpleReply ok = c.readSimple(512);
            assertEquals(0, ok.error());
            assertArrayEquals(new byte[512], ok.data());
        }
        try (RawClient c = RawClient.connect(ts.server)) {
            c.go("aligned", false, false);
            c.request(0, Nbd.CMD_READ, 1, 100, 512, null);
            c.request(0, Nbd.CMD_WRITE, 2, 512, 100, new byte[100]);
            c.request(0, Nbd.CMD_READ, 3, 1024, 512, null);
            c.flush();
            assertEquals(Errno.EINVAL.code(), c.readSimple(0).error());
            assertEquals(Errno.EINVAL.code(), c.readSimple(0).error());
            assertEquals(0, c.readSimple(512).error());
        }
    }

    @Test
    void oversizePayloadsGetEoverflowAndTheStreamStaysFramed() throws IOException {
        try (RawClient c = RawClient.connect(ts.server)) {
            c.go("small", false, false); // maximum payload 1 MiB
            c.request(0, Nbd.CMD_WRITE, 1, 0, 2 << 20, random(2 << 20, 1));
            c.request(0, Nbd.CMD_READ, 2, 0, 2 << 20, null);
            c.flush();
            assertEquals(Errno.EOVERFLOW.code(), c.readSimple(0).error());
            assertEquals(Errno.EOVERFLOW.code(), c.readSimple(0).error());
            assertServes(c, 70);
        }
    }

    @Test
    void blockStatusNeedsTheContextAndFlushNeedsZeroes() throws IOException {
        try (RawClient c = RawClient.connect(ts.server)) {
            c.go("disk", true, false);
            c.request(0, Nbd.CMD_BLOCK_STATUS, 1, 0, 4096, null);
            c.request(0, Nbd.CMD_FLUSH, 2, 1, 0, null);
            c.request(0, Nbd.CMD_FLUSH, 3, 0, 0, null);
            c.flush();
            assertEquals(Errno.EINVAL.code(), c.readChunk().errorCode());
            assertEquals(Errno.EINVAL.code(), c.readChunk().errorCode());
            assertEquals(0, c.readSimple(0).error());
        }
    }

    @Test
    void blockStatusReportsDataHolesAndZeroes() throws IOException {
        try (RawClient c = RawClient.connect(ts.server)) {
            c.go("small", true, true);
            c.request(0, Nbd.CMD_WRITE, 1, 0, 8192, random(8192, 3));
            c.request(Nbd.CMD_FLAG_NO_HOLE, Nbd.CMD_WRITE_ZEROES, 2, 8192, 4096, null);
            c.request(0, Nbd.CMD_BLOCK_STATUS, 3, 0, 1 << 20, null);
            c.request(Nbd.CMD_FLAG_REQ_ONE, Nbd.CMD_BLOCK_STATUS, 4, 0, 1 << 20, null);
            c.flush();
            assertEquals(0, c.readSimple(0).error());
            assertEquals(0, c.readSimple(0).error());
            RawClient.Chunk all = c.readChunk();
            assertEquals(Nbd.REPLY_TYPE_BLOCK_STATUS, all.type());
            ByteBuffer b = ByteBuffer.wrap(all.payload());
            assertEquals(1, b.getInt(), "context id from SET_META_CONTEXT");
            assertEquals(8192, b.getInt());
            assertEquals(0, b.getInt());
            assertEquals(4096, b.getInt());
            assertEquals(Nbd.STATE_ZERO, b.getInt());
            assertEquals((1 << 20) - 12288, b.getInt());
            assertEquals(Nbd.STATE_HOLE | Nbd.STATE_ZERO, b.getInt());
            assertFalse(b.hasRemaining());
            RawClient.Chunk one = c.readChunk();
            assertEquals(4 + 8, one.payload().length, "REQ_ONE gives one extent");
        }
    }

    @Test
    void repliesLeaveInCompletionOrderFromForeignThreads() throws Exception {
        // Later offsets complete sooner, so replies come back in the reverse of request order.
        try (TestServer slow = TestServer.start(b -> b.export(Export.of("slow",
                new DelayedCompletionDevice(64 << 20, off -> 200 - (off >> 20) * 5))));
                RawClient c = RawClient.connect(slow.server)) {
            c.go("slow", false, false);
            int n = 32;
            for (int i = 0; i < n; i++) {
                c.request(0, Nbd.CMD_WRITE, 1000 + i, (long) i << 20, 4096, random(4096, i));
            }
            c.flush();
            Set<Long> handles = new HashSet<>();
            for (int i = 0; i < n; i++) {
                handles.add(c.readSimple(0).handle());
            }
            assertEquals(n, handles.size());
            for (int i = 0; i < n; i++) {
                c.request(0, Nbd.CMD_READ, i, (long) i << 20, 4096, null);
            }
            c.flush();
            long first = -1;
            for (int i = 0; i < n; i++) {
                RawClient.SimpleReply r = c.readSimple(4096);
                if (i == 0) {
                    first = r.handle();
                }
                assertArrayEquals(random(4096, (int) r.handle()), r.data(), "data for handle " + r.handle());
            }
            assertNotEquals(0, first, "the first reply should be for a later request");
        }
    }

    @Test
    void clientResetWhileLargeReadRepliesAreSentNeverHarmsTheServer() throws IOException {
        long[] readBeforeReset = {0, 1, 100, (1 << 20) + 7, 10 << 20, 31 << 20};
        for (long cut : readBeforeReset) {
            for (boolean structured : new boolean[]{false, true}) {
                RawClient c = RawClient.connect(ts.server);
                c.go("disk", structured, false);
                for (int i = 0; i < 32; i++) {
                    c.request(0, Nbd.CMD_READ, i, (long) i << 20, 1 << 20, null);
                }
                c.flush();
                c.in.readNBytes((int) cut);
                c.reset();
            }
        }
        // The server still accepts, serves and has let go of the dead sessions.
        try (RawClient c = RawClient.connect(ts.server)) {
            c.go("disk", true, false);
            assertServes(c, 80);
        }
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (ts.server.connectionCount() > 0 && System.nanoTime() < deadline) {
            sleep(10);
        }
        assertEquals(0, ts.server.connectionCount());
    }

    @Test
    void discAnswersEverythingInFlightFirst() throws Exception {
        try (TestServer slow = TestServer.start(b -> b.export(Export.of("slow",
                new DelayedCompletionDevice(16 << 20, off -> 100))));
                RawClient c = RawClient.connect(slow.server)) {
            c.go("slow", false, false);
            for (int i = 0; i < 8; i++) {
                c.request(0, Nbd.CMD_READ, i, 0, 4096, null);
            }
            c.request(0, Nbd.CMD_DISC, 99, 0, 0, null);
            c.flush();
            for (int i = 0; i < 8; i++) {
                assertEquals(0, c.readSimple(4096).error());
            }
            assertTrue(c.closedByServer());
        }
    }

    @Test
    void shutdownFinishesInFlightRequestsThenRefusesNewOnesWithEshutdownOnStructuredReplies() throws Exception {
        DelayedCompletionDevice device = new DelayedCompletionDevice(16 << 20, off -> 1000);
        TestServer slow = TestServer.start(b -> b.export(Export.of("slow", device)));
        try (RawClient c = RawClient.connect(slow.server)) {
            c.go("slow", true, false);
            for (int i = 0; i < 4; i++) {
                c.request(0, Nbd.CMD_WRITE, i, (long) i * 4096, 4096, random(4096, i));
            }
            c.flush();
            await(() -> device.arrived() == 4, "the four writes reach the device");
            Thread closer = new Thread(slow.server::close);
            closer.start();
            awaitRefusingConnections(slow);
            c.request(0, Nbd.CMD_READ, 100, 0, 4096, null);
            c.flush();
            // The late READ is refused at once (the writes take a second at the device), in an error chunk...
            RawClient.Chunk refused = c.readChunk();
            assertEquals(100, refused.handle());
            assertEquals(Nbd.REPLY_TYPE_ERROR, refused.type());
            assertEquals(Errno.ESHUTDOWN.code(), ByteBuffer.wrap(refused.payload()).getInt(),
                    "a request after shutdown began gets ESHUTDOWN");
            // ...while every write in flight at shutdown still completes (simple replies: they carry no data).
            for (int i = 0; i < 4; i++) {
                RawClient.SimpleReply r = c.readSimple(0);
                assertEquals(0, r.error());
                assertTrue(r.handle() < 4);
            }
            assertTrue(c.closedByServer());
            closer.join(10_000);
            assertFalse(closer.isAlive());
            assertThrowsConnect(slow); // once close() returned, the listener is gone
        } finally {
            slow.close();
        }
    }

    @Test
    void shutdownLeavesNewSimpleReplyRequestsUnansweredSoTheKernelRetriesThemElsewhere() throws Exception {
        DelayedCompletionDevice device = new DelayedCompletionDevice(16 << 20, off -> 300);
        TestServer slow = TestServer.start(b -> b.export(Export.of("slow", device)));
        try (RawClient c = RawClient.connect(slow.server)) {
            c.go("slow", false, false);
            for (int i = 0; i < 4; i++) {
                c.request(0, Nbd.CMD_WRITE, i, (long) i * 4096, 4096, random(4096, i));
            }
            c.flush();
            await(() -> device.arrived() == 4, "the four writes reach the device");
            Thread closer = new Thread(slow.server::close);
            closer.start();
            awaitRefusingConnections(slow);
            c.request(0, Nbd.CMD_WRITE, 100, 8 * 4096, 4096, random(4096, 100));
            c.flush();
            for (int i = 0; i < 4; i++) {
                RawClient.SimpleReply r = c.readSimple(0);
                assertEquals(0, r.error(), "every write in flight at shutdown completes");
                assertTrue(r.handle() < 4);
            }
            // No reply for the late write (an error reply would be EIO to the kernel's filesystem): just the close.
            assertTrue(c.closedByServer());
            closer.join(10_000);
            assertFalse(closer.isAlive());
            assertThrowsConnect(slow); // once close() returned, the listener is gone
        } finally {
            slow.close();
        }
    }

    private static void await(java.util.function.BooleanSupplier condition, String what) {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "not within 10 s: " + what);
            sleep(5);
        }
    }

    /** Shutdown closes the listeners first, then puts every connection into draining, right after. */
    private static void awaitRefusingConnections(TestServer closing) {
        await(() -> {
            try (RawClient probe = RawClient.connect(closing.server)) {
                return false;
            } catch (IOException refused) {
                return true;
            }
        }, "the server begins shutting down (its listener is closed)");
    }

    private static void assertThrowsConnect(TestServer stopped) {
        try (RawClient c = RawClient.connect(stopped.server)) {
            throw new AssertionError("a stopped server still accepted a connection");
        } catch (IOException expected) {
            // refused: the listener is gone
        }
    }

    @Test
    void aClientThatNeverFinishesItsHandshakeIsDisconnected() throws Exception {
        try (TestServer quick = TestServer.start(b -> b.handshakeTimeout(java.time.Duration.ofMillis(300)));
                RawClient c = RawClient.connect(quick.server)) {
            c.in.readFully(new byte[18]);
            long start = System.nanoTime();
            assertTrue(c.closedByServer());
            assertTrue(System.nanoTime() - start < 5_000_000_000L);
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            throw new RuntimeException(e);
        }
    }
}
