package dev.rbridge.nbd.server;

import dev.rbridge.nbd.protocol.Nbd;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.time.Duration;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What one client can hold and for how long: replies it does not read, payload memory, connection slots, time. Each
 * test plays the misbehaving client with {@link RawClient} (from other loopback addresses where it plays another
 * peer) and checks both that the limit holds and that a well-behaved client beside it is served.
 */
@Tag("fault")
@Timeout(60)
class ServerLimitsTest {
    private static final int MiB = 1 << 20;

    /** Counts what the server reports through its metrics SPI. */
    static final class Recorder implements NbdServerMetrics {
        final Map<String, AtomicInteger> refused = new ConcurrentHashMap<>();
        final Map<String, AtomicInteger> closed = new ConcurrentHashMap<>();

        @Override
        public void connectionRefused(String reason) {
            refused.computeIfAbsent(reason, r -> new AtomicInteger()).incrementAndGet();
        }

        @Override
        public void connectionClosed(String reason) {
            closed.computeIfAbsent(reason, r -> new AtomicInteger()).incrementAndGet();
        }

        int refused(String reason) {
            AtomicInteger n = refused.get(reason);
            return n == null ? 0 : n.get();
        }

        int closed(String reason) {
            AtomicInteger n = closed.get(reason);
            return n == null ? 0 : n.get();
        }
    }

    /** The "slow" export's device: reads at 63 MiB complete after 3 s, all else at once. */
    private static DelayedCompletionDevice slowDevice() {
        return new DelayedCompletionDevice(64 << 20, off -> off == 63L * MiB ? 3000 : 0);
    }

    private static TestServer server(Recorder metrics, Consumer<NbdServerConfig.Builder> more) throws IOException {
        return server(metrics, slowDevice(), more);
    }

    private static TestServer server(Recorder metrics, DelayedCompletionDevice slow,
            Consumer<NbdServerConfig.Builder> more) throws IOException {
        return TestServer.start(b -> {
            b.metrics(metrics);
            b.export(Export.of("slow", slow));
            more.accept(b);
        });
    }

    private static byte[] random(int n, long seed) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

    private static void assertReads(RawClient c, long handle) throws IOException {
        long start = System.nanoTime();
        c.request(0, Nbd.CMD_READ, handle, 0, 4096, null);
        c.flush();
        RawClient.SimpleReply r = c.readSimple(4096);
        assertEquals(0, r.error());
        assertEquals(handle, r.handle());
        // generous for a loaded 2-core machine; a client held up behind another waits out its 10 s socket timeout
        assertTrue(System.nanoTime() - start < 5_000_000_000L, "a read took "
                + (System.nanoTime() - start) / 1_000_000 + " ms");
    }

    static void await(String what, java.util.function.BooleanSupplier done) {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (!done.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "timed out waiting for " + what);
            sleep(20);
        }
    }

    @Test
    void aClientThatReadsNoRepliesNeverHoldsUpTheThreadsThatCompleteRequests() throws Exception {
        // The device completes every request on its own two threads, as the memserver links do.
        DelayedCompletionDevice slow = slowDevice();
        try (TestServer ts = server(new Recorder(), slow, b -> {
        });
                RawClient stuck = RawClient.connect(ts.server);
                RawClient other = RawClient.connect(ts.server)) {
            stuck.go("slow", false, false);
            for (int i = 0; i < 64; i++) {
                stuck.request(0, Nbd.CMD_READ, i, (long) (i % 32) * MiB, MiB, null);
            }
            stuck.flush();
            // All 64 reads reached the device, which completes them at once: 64 MiB of replies, far more than the
            // socket holds, so whoever writes them would now block.
            await("the 64 reads to reach the device", () -> slow.arrived() == 64);
            other.go("slow", false, false);
            for (int i = 0; i < 10; i++) {
                assertReads(other, 100 + i);
            }
        }
    }

    @Test
    void repliesTheClientDoesNotReadHoldTheirSlotsSoTheyCannotPileUp() throws Exception {
        int requests = 1_000_000; // 28 MB of FLUSH requests: far more than socket buffers hold
        try (TestServer ts = server(new Recorder(), b -> b.maxInFlightPerConnection(8));
                RawClient c = RawClient.connect(ts.server)) {
            c.go("disk", false, false); // completes at once, so only the slots can stop the server reading
            Thread writer = Thread.ofPlatform().daemon().start(() -> {
                try {
                    for (int i = 0; i < requests; i++) {
                        c.request(0, Nbd.CMD_FLUSH, i, 0, 0, null);
                    }
                    c.flush();
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
            writer.join(2000);
            assertTrue(writer.isAlive(), "the server read every request although the client read no reply");
            for (int i = 0; i < requests; i++) {
                assertEquals(0, c.readSimple(0).error());
            }
            writer.join(10_000);
            assertFalse(writer.isAlive());
        }
    }

    @Test
    void payloadMemoryIsBoundedAndRequestsBeyondItWaitInsteadOfFailing() throws Exception {
        AtomicLong most = new AtomicLong();
        try (TestServer ts = server(new Recorder(), b -> b.payloadBudget(32 * MiB).payloadBudgetPerConnection(4 * MiB));
                RawClient c = RawClient.connect(ts.server)) {
            Thread sampler = Thread.ofPlatform().daemon().start(() -> {
                while (!Thread.currentThread().isInterrupted()) {
                    most.accumulateAndGet(ts.server.state().payloadUsedBytes(), Math::max);
                    try {
                        Thread.sleep(1);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            });
            c.go("disk", false, false);
            for (int i = 0; i < 16; i++) {
                c.request(0, Nbd.CMD_WRITE, i, (long) i * MiB, MiB, random(MiB, i));
            }
            c.flush();
            for (int i = 0; i < 16; i++) {
                assertEquals(0, c.readSimple(0).error());
            }
            for (int i = 0; i < 32; i++) {
                c.request(0, Nbd.CMD_READ, i, (long) (i % 16) * MiB, MiB, null);
            }
            c.flush();
            sleep(300); // replies unread: the connection holds its share, the rest of its requests wait
            assertTrue(ts.server.state().payloadUsedBytes() <= 4 * MiB);
            for (int i = 0; i < 32; i++) {
                RawClient.SimpleReply r = c.readSimple(MiB);
                assertEquals(0, r.error());
                assertArrayEquals(random(MiB, r.handle() % 16), r.data(), "read " + r.handle());
            }
            sampler.interrupt();
            sampler.join();
            assertTrue(most.get() <= 4 * MiB, "one connection held " + most.get() + " bytes, its share is " + 4 * MiB);
            assertTrue(most.get() >= 2 * MiB, "the test never filled the share (" + most.get() + ")");
            await("buffers back", () -> ts.server.state().payloadUsedBytes() == 0);
            // Released buffers are kept for reuse up to a quarter of the budget, and the gauge says how much.
            long pooled = ts.server.state().payloadPooledBytes();
            assertTrue(pooled >= MiB && pooled <= 8 * MiB, "pooled " + pooled);
        }
    }

    @Test
    void aNewConnectionTakesTheSlotOfTheLongestIdleOneOfItsAddress() throws Exception {
        Recorder m = new Recorder();
        try (TestServer ts = server(m, b -> b.maxConnectionsPerPeer(2));
                RawClient a1 = RawClient.connectFrom(ts.server, "127.0.0.2");
                RawClient a2 = RawClient.connectFrom(ts.server, "127.0.0.2")) {
            a1.go("disk", false, false);
            a2.go("disk", false, false);
            assertReads(a2, 1); // a1 is now the longest idle
            try (RawClient a3 = RawClient.connectFrom(ts.server, "127.0.0.2");
                    RawClient b1 = RawClient.connectFrom(ts.server, "127.0.0.3")) {
                a3.go("disk", false, false);
                b1.go("disk", false, false);
                assertTrue(a1.closedByServer());
                assertReads(a2, 2);
                assertReads(a3, 3);
                assertReads(b1, 4); // another address is not limited by 127.0.0.2's share
            }
            assertEquals(1, m.closed("idle_evicted"));
        }
    }

    @Test
    void connectionsStillInTheirHandshakeGiveUpTheirSlotsFirst() throws Exception {
        try (TestServer ts = server(new Recorder(), b -> b.maxConnectionsPerPeer(2));
                RawClient serving = RawClient.connectFrom(ts.server, "127.0.0.2");
                RawClient silent = RawClient.connectFrom(ts.server, "127.0.0.2")) {
            serving.go("disk", false, false);
            try (RawClient fresh = RawClient.connectFrom(ts.server, "127.0.0.2")) {
                fresh.go("disk", false, false);
                assertTrue(silent.closedByServer());
                assertReads(serving, 1);
                assertReads(fresh, 2);
            }
        }
    }

    @Test
    void connectionsWaitingForMemoryTheyDoNotHoldCannotKeepTheirSlots() throws Exception {
        try (TestServer ts = server(new Recorder(), b -> b.maxConnectionsPerPeer(2).payloadBudget(64 * MiB)
                .payloadBudgetPerPeer(32 * MiB).stalledGrace(Duration.ofSeconds(30)));
                RawClient holder = RawClient.connectFrom(ts.server, "127.0.0.2");
                RawClient waiter = RawClient.connectFrom(ts.server, "127.0.0.2")) {
            holder.go("disk", false, false);
            waiter.go("disk", false, false);
            holder.request(0, Nbd.CMD_WRITE, 1, 0, 32 * MiB, new byte[4096]); // holds its address's share
            holder.flush();
            await("the holder to hold its share", () -> ts.server.state().payloadUsedBytes() == 32 * MiB);
            waiter.request(0, Nbd.CMD_WRITE, 2, 0, 32 * MiB, null); // waits for memory, holds none
            waiter.flush();
            await("the waiter to wait", () -> ts.server.state().payloadWaiting() == 1);
            try (RawClient fresh = RawClient.connectFrom(ts.server, "127.0.0.2")) {
                fresh.go("disk", false, false);
                assertTrue(waiter.closedByServer(), "the waiting connection kept its slot");
                assertFalse(holder.closedByServer(200), "the connection holding memory was evicted for a slot");
            }
        }
    }

    @Test
    void whenNoConnectionOfTheAddressIsIdleTheNewOneIsRefused() throws Exception {
        Recorder m = new Recorder();
        try (TestServer ts = server(m, b -> b.maxConnectionsPerPeer(1));
                RawClient busy = RawClient.connectFrom(ts.server, "127.0.0.2")) {
            busy.go("slow", false, false);
            busy.request(0, Nbd.CMD_READ, 7, 63L * MiB, 4096, null); // completes after 3 s
            busy.flush();
            sleep(200);
            try (RawClient refused = RawClient.connectFrom(ts.server, "127.0.0.2")) {
                assertTrue(refused.closedByServer());
            }
            assertEquals(1, m.refused("peer_limit"));
            assertEquals(7, busy.readSimple(4096).handle());
        }
    }

    @Test
    void theGlobalLimitTakesASlotFromTheAddressHoldingTheMost() throws Exception {
        try (TestServer ts = server(new Recorder(), b -> b.maxConnections(3));
                RawClient a1 = RawClient.connectFrom(ts.server, "127.0.0.2");
                RawClient a2 = RawClient.connectFrom(ts.server, "127.0.0.2");
                RawClient b1 = RawClient.connectFrom(ts.server, "127.0.0.3")) {
            for (RawClient c : new RawClient[]{a1, a2, b1}) {
                c.go("disk", false, false);
            }
            assertReads(b1, 1);
            sleep(20);
            assertReads(a1, 2);
            assertReads(a2, 3);
            // A reply reaches the client before its connection counts the request done: a newcomer now could find
            // no connection of 127.0.0.2 idle yet (seen in 3 of 120 tries).
            await("every connection idle at the server", () -> ts.server.idleConnections() == 3);
            // b1 is now the longest idle of all, but its address holds fewer: a slot of 127.0.0.2 goes
            try (RawClient c1 = RawClient.connectFrom(ts.server, "127.0.0.4")) {
                c1.go("disk", false, false);
                assertTrue(a1.closedByServer());
                assertReads(a2, 4);
                assertReads(b1, 5);
                assertReads(c1, 6);
            }
        }
    }

    /**
     * Connections that have not finished their handshake never cost a session its slot, however many: at the global
     * limit the newcomer used to take the busiest address's longest-idle connection, serving or not, so a flood of
     * connections that never said a word closed every idle session. Now a newcomer takes only a handshaking
     * connection's place, or waits for its own handshake to end before an idle session makes way.
     */
    @Test
    void aFloodOfHandshakingConnectionsEvictsNoSession() throws Exception {
        Recorder m = new Recorder();
        try (TestServer ts = server(m, b -> b.maxConnections(4).maxConnectionsPerPeer(4))) {
            RawClient[] sessions = new RawClient[4];
            try {
                for (int i = 0; i < sessions.length; i++) {
                    sessions[i] = RawClient.connectFrom(ts.server, "127.0.0.2");
                    sessions[i].go("disk", false, false);
                }
                for (int i = 0; i < sessions.length; i++) {
                    assertReads(sessions[i], i + 1);
                }
                // Pre-handshake connections from other addresses (one each: the busiest address is the sessions'),
                // then from the sessions' own address, each held open while the next ones come.
                java.util.List<RawClient> flood = new java.util.ArrayList<>();
                try {
                    for (int i = 0; i < 60; i++) {
                        String from = i < 40 ? "127.0.1." + (i + 1) : "127.0.0.2";
                        RawClient f = RawClient.connectFrom(ts.server, from);
                        flood.add(f);
                        if (i % 2 == 0) {
                            f.hello(); // some read the greeting and send their flags, none goes further
                        }
                    }
                    // The acceptor takes connections in order: once this one is greeted, every one before it was
                    // given its place or refused.
                    RawClient last = RawClient.connectFrom(ts.server, "127.0.2.1");
                    flood.add(last);
                    last.hello();
                    for (int i = 0; i < sessions.length; i++) {
                        assertFalse(sessions[i].closedByServer(50), "session " + i + " was closed for the flood");
                        assertReads(sessions[i], 10 + i);
                    }
                } finally {
                    for (RawClient f : flood) {
                        f.close();
                    }
                }
                assertEquals(0, m.closed("idle_evicted"), "sessions closed to make room for handshakes");
            } finally {
                for (RawClient c : sessions) {
                    if (c != null) {
                        c.close();
                    }
                }
            }
        }
    }

    @Test
    void aRequestThatDoesNotArriveWholeIsTimedOut() throws Exception {
        Recorder m = new Recorder();
        try (TestServer ts = server(m, b -> b.requestTimeout(Duration.ofMillis(300)));
                RawClient header = RawClient.connect(ts.server);
                RawClient payload = RawClient.connect(ts.server);
                RawClient idle = RawClient.connect(ts.server)) {
            header.go("disk", false, false);
            payload.go("disk", false, false);
            idle.go("disk", false, false);
            header.out.write(new byte[14]);
            header.flush();
            payload.request(0, Nbd.CMD_WRITE, 1, 0, MiB, new byte[MiB / 2]);
            payload.flush();
            assertTrue(header.closedByServer());
            assertTrue(payload.closedByServer());
            assertEquals(2, m.closed("request_timeout"));
            sleep(500);
            assertReads(idle, 3); // idle for longer than the timeout, and still served
        }
    }

    @Test
    void timeSpentWaitingForMemoryDoesNotCountAgainstTheClient() throws Exception {
        Recorder m = new Recorder();
        try (TestServer ts = server(m, b -> b.payloadBudget(32 * MiB).payloadBudgetPerPeer(32 * MiB)
                .payloadBudgetPerConnection(32 * MiB).requestTimeout(Duration.ofSeconds(2))
                .stalledGrace(Duration.ofSeconds(30)));
                RawClient hog = RawClient.connectFrom(ts.server, "127.0.0.3");
                RawClient c = RawClient.connectFrom(ts.server, "127.0.0.2")) {
            hog.go("disk", false, false);
            c.go("disk", false, false);
            for (int i = 0; i < 4; i++) { // the hog takes every byte and reads no reply
                hog.request(0, Nbd.CMD_READ, 10 + i, (long) i * 8 * MiB, 8 * MiB, null);
            }
            hog.flush();
            await("the hog to hold the budget", () -> ts.server.state().payloadUsedBytes() == 32 * MiB);
            // A READ whose header arrives in two parts, then waits for memory for longer than the request timeout:
            // only the first 300 ms were the client's.
            java.io.ByteArrayOutputStream header = new java.io.ByteArrayOutputStream();
            new java.io.DataOutputStream(header).writeInt(Nbd.REQUEST_MAGIC);
            java.io.DataOutputStream h = new java.io.DataOutputStream(header);
            h.writeShort(0);
            h.writeShort(Nbd.CMD_READ);
            h.writeLong(2);
            h.writeLong(0);
            h.writeInt(MiB);
            byte[] bytes = header.toByteArray();
            c.out.write(bytes, 0, 14);
            c.flush();
            sleep(300);
            c.out.write(bytes, 14, bytes.length - 14);
            c.flush();
            sleep(4500);
            assertEquals(0, m.closed("request_timeout"), "a client was timed out while the server made it wait");
            hog.reset();
            RawClient.SimpleReply r = c.readSimple(MiB);
            assertEquals(2, r.handle());
            assertEquals(0, r.error());
        }
    }

    @Test
    void repliesLeftUnreadAreTimedOut() throws Exception {
        Recorder m = new Recorder();
        try (TestServer ts = server(m, b -> b.replyTimeout(Duration.ofMillis(500)));
                RawClient stuck = RawClient.connect(ts.server)) {
            stuck.go("slow", false, false);
            for (int i = 0; i < 64; i++) {
                stuck.request(0, Nbd.CMD_READ, i, (long) (i % 32) * MiB, MiB, null);
            }
            stuck.flush();
            await("the unread replies' connection to close", () -> m.closed("reply_timeout") == 1);
            await("its buffers to come back", () -> ts.server.state().payloadUsedBytes() == 0);
        }
    }

    @Test
    void aStalledConnectionGivesUpItsMemoryWhenOthersWaitForIt() throws Exception {
        Recorder m = new Recorder();
        try (TestServer ts = server(m, b -> b.payloadBudget(32 * MiB).stalledGrace(Duration.ofMillis(200)));
                RawClient hog = RawClient.connect(ts.server);
                RawClient other = RawClient.connect(ts.server)) {
            hog.go("disk", false, false);
            other.go("disk", false, false);
            hog.request(0, Nbd.CMD_WRITE, 1, 0, 32 * MiB, new byte[4096]); // declares it all, sends 4 KiB
            hog.flush();
            await("the hog to hold the budget", () -> ts.server.state().payloadUsedBytes() == 32 * MiB);
            assertReads(other, 2);
            assertTrue(hog.closedByServer());
            assertEquals(1, m.closed("stalled_evicted"));
        }
    }

    @Test
    void aStalledConnectionKeepsItsMemoryWhileNobodyWaits() throws Exception {
        Recorder m = new Recorder();
        try (TestServer ts = server(m, b -> b.payloadBudget(64 * MiB).stalledGrace(Duration.ofMillis(100)));
                RawClient slowSender = RawClient.connect(ts.server)) {
            slowSender.go("disk", false, false);
            slowSender.request(0, Nbd.CMD_WRITE, 1, 0, 8 * MiB, new byte[4096]);
            slowSender.flush();
            sleep(600);
            slowSender.out.write(new byte[8 * MiB - 4096]);
            slowSender.flush();
            assertEquals(0, slowSender.readSimple(0).error());
            assertEquals(0, m.closed("stalled_evicted"));
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
