package dev.rbridge.ops.http;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.BindException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The server against peers that misbehave on purpose: each test keeps a well-behaved client asking beside the
 * attack and checks it is answered promptly, and that the attack is cut off and counted. The machine may be a
 * loaded 2-core VM: no test relies on timing tighter than a few seconds, and an order between server events is
 * waited for (a latch, a counter), never assumed from a sleep.
 */
@Tag("fault")
@Timeout(60)
class OpsHttpServerTest {
    /**
     * Short timeouts for the tests that watch them fire ({@link #shortTimeouts}); the others keep the defaults, so
     * that nothing times out under them on a slow machine.
     */
    private static final Duration REQUEST = Duration.ofSeconds(3);
    private static final Duration IDLE = Duration.ofSeconds(3);
    private static final Duration WRITE = Duration.ofSeconds(3);
    /** A well-behaved request takes milliseconds; this much allows for a loaded machine. */
    private static final Duration SERVED = Duration.ofSeconds(2);
    /** How long past a timeout its effect may show: a sweep round plus a loaded machine. */
    private static final Duration SLACK = Duration.ofSeconds(5);

    private final Map<Refusal, AtomicLong> counted = new ConcurrentHashMap<>();
    private final OpsHttpMetrics metrics = r -> counted.computeIfAbsent(r, x -> new AtomicLong()).incrementAndGet();
    private final List<OpsHttpServer> servers = new ArrayList<>();

    private long count(Refusal r) {
        AtomicLong n = counted.get(r);
        return n == null ? 0 : n.get();
    }

    private OpsHttpServer start(OpsHttpConfig.Builder b, Handler h) throws IOException {
        OpsHttpServer s = OpsHttpServer.start(b.build(), h, metrics);
        servers.add(s);
        return s;
    }

    private static OpsHttpConfig.Builder shortTimeouts(OpsHttpConfig.Builder b) {
        return b.timeouts(REQUEST, IDLE, WRITE, OpsHttpConfig.LINGER);
    }

    /** Waits (a few seconds at most) until {@code reason} has been counted {@code n} times. */
    private void awaitCount(Refusal reason, long n) throws InterruptedException {
        long deadline = System.nanoTime() + SLACK.toNanos();
        while (count(reason) < n && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertEquals(n, count(reason), reason.label());
    }

    private static OpsHttpConfig.Builder config() {
        return OpsHttpConfig.builder("test", new InetSocketAddress("127.0.0.1", 0));
    }

    private static final Handler HELLO = r -> HttpResponse.text(200, "hello " + r.path() + "\n");

    @AfterEach
    void stop() {
        servers.forEach(OpsHttpServer::close);
    }

    /** A well-behaved request on a new connection, answered within {@code max}. */
    private static void servedWithin(OpsHttpServer s, Duration max) throws IOException {
        long t0 = System.nanoTime();
        try (RawHttp c = new RawHttp(s.address())) {
            RawHttp.Answer a = c.get("/ok");
            assertEquals(200, a.status(), a.head());
        }
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(ms <= max.toMillis(), "a well-behaved request took " + ms + " ms");
    }

    @Test
    void keepAlivePipeliningHeadAndClose() throws Exception {
        OpsHttpServer s = start(config(), HELLO);
        try (RawHttp c = new RawHttp(s.address())) {
            RawHttp.Answer a = c.get("/one");
            assertEquals("hello /one\n", a.body());
            assertEquals("keep-alive", a.header("Connection"));
            assertEquals("nosniff", a.header("X-Content-Type-Options"));
            assertEquals("hello /two\n", c.get("/two").body(), "the connection stays");
            c.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nHEAD /b HTTP/1.1\r\nHost: x\r\n\r\n"
                    + "GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            assertEquals("hello /a\n", c.read().body());
            RawHttp.Answer head = c.readHead();
            assertEquals("", head.body(), "HEAD: no body");
            assertEquals("hello /b\n".length(), Integer.parseInt(head.header("Content-Length")));
            RawHttp.Answer last = c.read();
            assertEquals("hello /c\n", last.body());
            assertEquals("close", last.header("Connection"));
            assertTrue(c.closedByServer());
        }
        assertEquals(0, s.openConnections() > 0 ? awaitNoConnections(s) : 0);
    }

    private static int awaitNoConnections(OpsHttpServer s) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (s.openConnections() > 0 && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        return s.openConnections();
    }

    @Test
    void slowLorisGetsA408AndNeverHoldsAWorker() throws Exception {
        // one worker: if reading a request held it, the slow client would starve the well-behaved one
        OpsHttpServer s = start(shortTimeouts(config().workers(1, 1)), HELLO);
        List<RawHttp> slow = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            slow.add(new RawHttp(s.address()).send("GET /slow HTTP/1.1\r\n"));
        }
        long t0 = System.nanoTime();
        String rest = "Host: 127.0.0.1\r\nX-Dribble: ";
        // dribble for half the request timeout (the last bytes must not race the 408 and its linger), asking beside
        for (int i = 0; System.nanoTime() - t0 < REQUEST.toNanos() / 2; i++) {
            for (RawHttp c : slow) {
                c.send(String.valueOf(rest.charAt(i % rest.length())));
            }
            servedWithin(s, SERVED);
            Thread.sleep(50);
        }
        for (RawHttp c : slow) {
            RawHttp.Answer a = c.read();
            assertEquals(408, a.status(), a.head());
            assertTrue(c.closedByServer());
            c.close();
        }
        long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        // the request timeout cut them, not the client's 10 s read timeout
        assertTrue(took < REQUEST.plus(SLACK).toMillis(), "cut off after " + took + " ms");
        assertEquals(5, count(Refusal.REQUEST_TIMEOUT));
        servedWithin(s, SERVED);
    }

    @Test
    void silentConnectionsAreEvictedOldestFirstAndTimeOut() throws Exception {
        OpsHttpServer s = start(shortTimeouts(config().maxConnections(8, 8)), HELLO);
        List<RawHttp> silent = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            silent.add(new RawHttp(s.address())); // accepted in this order: the first is the oldest
        }
        awaitOpen(s, 8);
        servedWithin(s, SERVED); // it takes the oldest silent connection's slot
        assertTrue(silent.getFirst().closedByServer(), "the oldest silent connection made room");
        assertEquals(1, count(Refusal.EVICTED));
        // the rest go at the idle timeout, counted as connections that never asked anything
        for (RawHttp c : silent.subList(1, silent.size())) {
            c.socket.setSoTimeout((int) IDLE.plus(SLACK).toMillis());
            assertTrue(c.closedByServer());
            c.close();
        }
        assertEquals(7, count(Refusal.IDLE_TIMEOUT));
        // a keep-alive connection that asked something also goes quietly at the idle timeout, uncounted
        try (RawHttp c = new RawHttp(s.address())) {
            c.get("/x");
            c.socket.setSoTimeout((int) IDLE.plus(SLACK).toMillis());
            assertTrue(c.closedByServer());
        }
        assertEquals(7, count(Refusal.IDLE_TIMEOUT));
    }

    private static void awaitOpen(OpsHttpServer s, int n) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (s.openConnections() < n && System.nanoTime() < deadline) {
            Thread.sleep(5);
        }
        assertEquals(n, s.openConnections());
    }

    @Test
    void aPeerAtItsCapEvictsItsOwnConnectionsNotAnotherPeers() throws Exception {
        OpsHttpServer s = start(config().maxConnections(8, 3), HELLO);
        List<RawHttp> mine = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            mine.add(new RawHttp(s.address(), "127.0.0.1"));
        }
        List<RawHttp> theirs = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            theirs.add(new RawHttp(s.address(), "127.0.0.2")); // accepted in this order: oldest first
        }
        awaitOpen(s, 6);
        for (int i = 0; i < 3; i++) { // 127.0.0.2 keeps opening: it evicts its own oldest each time
            theirs.add(new RawHttp(s.address(), "127.0.0.2"));
        }
        awaitCount(Refusal.EVICTED, 3);
        awaitOpen(s, 6); // a victim is counted evicted before its newcomer is admitted
        for (RawHttp c : mine) {
            assertEquals(200, c.get("/still-here").status(), "another peer's connections are untouched");
        }
        for (RawHttp c : theirs.subList(0, 3)) {
            assertTrue(c.closedByServer());
        }
        for (RawHttp c : theirs.subList(3, 6)) {
            assertEquals(200, c.get("/newest").status());
        }
    }

    @Test
    void atTheGlobalCapThePeerHoldingTheMostEvictableConnectionsLosesOne() throws Exception {
        CountDownLatch started = new CountDownLatch(3);
        CountDownLatch release = new CountDownLatch(1);
        OpsHttpServer s = start(config().maxConnections(6, 6).workers(4, 1), r -> {
            if (r.path().equals("/slow")) {
                started.countDown();
                release.await(30, TimeUnit.SECONDS);
            }
            return HELLO.handle(r);
        });
        // 127.0.0.2 holds four connections, three of them being answered (a fourth worker is free); 127.0.0.3 holds
        // two idle ones
        RawHttp idle2 = new RawHttp(s.address(), "127.0.0.2"); // the oldest of all
        awaitOpen(s, 1);
        List<RawHttp> busy2 = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            busy2.add(new RawHttp(s.address(), "127.0.0.2").send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
        }
        assertTrue(started.await(10, TimeUnit.SECONDS), "three requests are being answered");
        RawHttp idle3a = new RawHttp(s.address(), "127.0.0.3");
        awaitOpen(s, 5);
        RawHttp idle3b = new RawHttp(s.address(), "127.0.0.3");
        awaitOpen(s, 6);
        try (RawHttp newcomer = new RawHttp(s.address(), "127.0.0.4")) {
            assertEquals(200, newcomer.get("/new").status());
            assertEquals(1, count(Refusal.EVICTED));
            assertEquals(200, idle2.get("/still-here").status(), "127.0.0.2's one idle connection stays");
            idle3a.socket.setSoTimeout((int) SLACK.toMillis()); // well before its idle timeout could close it
            assertTrue(idle3a.closedByServer(), "127.0.0.3 holds the most evictable connections: its oldest went");
            assertEquals(200, idle3b.get("/still-here").status());
            release.countDown();
            for (RawHttp c : busy2) {
                assertEquals(200, c.read().status());
            }
        } finally {
            release.countDown();
            for (RawHttp c : List.of(idle2, idle3a, idle3b)) {
                c.close();
            }
            for (RawHttp c : busy2) {
                c.close();
            }
        }
    }

    @Test
    void whenEveryConnectionIsBusyANewOneGetsA503AndTheRestFinish() throws Exception {
        CountDownLatch started = new CountDownLatch(2);
        CountDownLatch release = new CountDownLatch(1);
        OpsHttpServer s = start(config().maxConnections(2, 2).workers(2, 1), r -> {
            started.countDown();
            release.await(30, TimeUnit.SECONDS);
            return HttpResponse.text(200, "done\n");
        });
        // two peers, so the global cap is what the third meets
        try (RawHttp a = new RawHttp(s.address(), "127.0.0.2"); RawHttp b = new RawHttp(s.address(), "127.0.0.3")) {
            a.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
            b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(started.await(10, TimeUnit.SECONDS), "both requests are being answered");
            try (RawHttp c = new RawHttp(s.address())) {
                RawHttp.Answer refused = c.read();
                assertEquals(503, refused.status());
                assertTrue(refused.body().contains("too many connections"), refused.body());
            }
            assertEquals(1, count(Refusal.CONNECTION_LIMIT));
            release.countDown();
            assertEquals("done\n", a.read().body());
            assertEquals("done\n", b.read().body());
        }
    }

    @Test
    void aFullQueueAnswers503Busy() throws Exception {
        CountDownLatch started = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        OpsHttpServer s = start(config().workers(1, 1), r -> {
            started.countDown();
            release.await(30, TimeUnit.SECONDS);
            return HttpResponse.text(200, "done\n");
        });
        try (RawHttp a = new RawHttp(s.address()); RawHttp b = new RawHttp(s.address());
                RawHttp c = new RawHttp(s.address())) {
            a.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(started.await(10, TimeUnit.SECONDS), "the one worker is busy");
            // one of these takes the one place in the queue, the other is refused: which, is the server's timing
            b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
            c.send("GET /c HTTP/1.1\r\nHost: x\r\n\r\n");
            awaitCount(Refusal.BUSY, 1);
            release.countDown();
            assertEquals(200, a.read().status());
            List<Integer> statuses = new ArrayList<>(List.of(b.read().status(), c.read().status()));
            statuses.sort(null);
            assertEquals(List.of(200, 503), statuses);
        }
    }

    @Test
    void oversizedRequestsGetTheirStatusReadableBeforeTheClose() throws Exception {
        OpsHttpServer s = start(config().limits(new RequestLimits(128, 256, 8, 16)), HELLO);
        try (RawHttp c = new RawHttp(s.address())) {
            // the client is still sending when the server answers: lingering keeps the answer from being reset away
            c.send("GET /" + "x".repeat(4000) + " HTTP/1.1\r\n");
            assertEquals(414, c.read().status());
            assertTrue(c.closedByServer());
        }
        try (RawHttp c = new RawHttp(s.address())) {
            c.send("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + "y".repeat(4000) + "\r\n\r\n");
            assertEquals(431, c.read().status());
        }
        try (RawHttp c = new RawHttp(s.address())) {
            c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n" + "z".repeat(4000));
            RawHttp.Answer a = c.read();
            assertEquals(413, a.status());
            assertEquals("close", a.header("Connection"));
        }
        try (RawHttp c = new RawHttp(s.address())) {
            assertEquals(400, c.send("\u0016\u0003\u0001\u0002\u0000\u0001\u0000\u01fc\u0003\u0003\r\n").read()
                    .status(), "a TLS hello is not a request");
        }
        assertEquals(3, count(Refusal.TOO_LARGE));
        assertEquals(1, count(Refusal.MALFORMED));
        servedWithin(s, SERVED);
    }

    @Test
    void aPeerThatDoesNotReadItsAnswerIsCutOffAtTheWriteTimeout() throws Exception {
        byte[] big = new byte[32 << 20];
        Arrays.fill(big, (byte) 'a');
        OpsHttpServer s = start(shortTimeouts(config()), r -> r.path().equals("/big")
                ? new HttpResponse(200, HttpResponse.TEXT, big, List.of())
                : HELLO.handle(r));
        try (RawHttp c = new RawHttp(s.address())) {
            c.socket.setReceiveBufferSize(4096);
            c.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
            long t0 = System.nanoTime();
            while (count(Refusal.WRITE_TIMEOUT) == 0 && System.nanoTime() - t0 < WRITE.plus(SLACK).toNanos()) {
                servedWithin(s, SERVED);
                Thread.sleep(100);
            }
            assertEquals(1, count(Refusal.WRITE_TIMEOUT));
        }
        servedWithin(s, SERVED);
    }

    @Test
    void aFloodEvictsAStalledAnswerButNotOneItsPeerReadsSlowly() throws Exception {
        byte[] big = new byte[32 << 20];
        Arrays.fill(big, (byte) 'm');
        // two slots for 127.0.0.1, a write timeout far off: only an eviction can cut an answer short here; the slow
        // reader may be held up for most of the stall time by a loaded machine and still count as reading
        OpsHttpServer s = start(config().maxConnections(8, 2).writeStall(Duration.ofSeconds(2))
                .timeouts(OpsHttpConfig.REQUEST_TIMEOUT, OpsHttpConfig.IDLE_TIMEOUT, Duration.ofSeconds(60),
                        OpsHttpConfig.LINGER),
                r -> r.path().equals("/metrics")
                        ? new HttpResponse(200, HttpResponse.TEXT, big, List.of())
                        : HELLO.handle(r));
        AtomicBoolean hurry = new AtomicBoolean();
        AtomicLong slowGot = new AtomicLong();
        try (RawHttp slow = new RawHttp(s.address()); RawHttp stalled = new RawHttp(s.address())) {
            RawHttp.Answer head = slow.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").readHead();
            assertEquals(200, head.status());
            // the slow reader takes 8 KiB every 50 ms (160 KiB/s) until the flood is over, then the rest at once
            CompletableFuture<Void> slowDone = CompletableFuture.runAsync(() -> {
                byte[] b = new byte[8 << 10];
                try {
                    for (int n; slowGot.get() < big.length && (n = slow.readSome(b)) >= 0;) {
                        slowGot.addAndGet(n);
                        if (!hurry.get()) {
                            Thread.sleep(50);
                        }
                    }
                } catch (IOException | InterruptedException e) {
                    // cut off: slowGot says how far it came
                }
            });
            // its answer is the older one: evicting the oldest writer would pick it
            stalled.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); // and never read
            // the flood: a new connection from 127.0.0.1 every 50 ms. Both slots are taken by answers, so newcomers are
            // refused until one is evicted, and the first eviction is of the slow or of the stalled answer
            List<RawHttp> flood = new ArrayList<>();
            try {
                long t0 = System.nanoTime();
                long evictedAt = 0;
                while (System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(30)) {
                    flood.add(new RawHttp(s.address()));
                    Thread.sleep(50);
                    if (evictedAt == 0 && count(Refusal.EVICTED) > 0) {
                        evictedAt = System.nanoTime();
                    }
                    // after the stalled answer went, flood on a while: newcomers now evict each other
                    if (evictedAt != 0 && System.nanoTime() - evictedAt > TimeUnit.SECONDS.toNanos(1)) {
                        break;
                    }
                }
                assertTrue(evictedAt != 0, "the stalled answer's connection was never evicted");
                assertFalse(slowDone.isDone(), "the slow reader was cut off after " + slowGot + " bytes");
            } finally {
                for (RawHttp c : flood) {
                    c.close();
                }
            }
            hurry.set(true);
            try {
                slowDone.get(30, TimeUnit.SECONDS);
            } catch (TimeoutException e) {
                throw new AssertionError("the slow reader's answer stopped after " + slowGot + " bytes", e);
            }
            assertEquals(big.length, slowGot.get(), "the slow reader got its whole answer");
            long stalledGot = stalled.readToClose();
            assertTrue(stalledGot < big.length, "the stalled answer was cut short: " + stalledGot + " bytes");
        }
        assertEquals(0, count(Refusal.WRITE_TIMEOUT));
        servedWithin(s, SERVED);
    }

    @Test
    void aFailingHandlerIsA500AndTheServerCarriesOn() throws Exception {
        OpsHttpServer s = start(config(), r -> {
            if (r.path().equals("/boom")) {
                throw new IllegalStateException("boom");
            }
            if (r.path().equals("/refuse")) {
                throw new HttpError(409, Refusal.METHOD, "no");
            }
            return HELLO.handle(r);
        });
        try (RawHttp c = new RawHttp(s.address())) {
            RawHttp.Answer a = c.get("/boom");
            assertEquals(500, a.status());
            assertTrue(a.body().contains("boom"), a.body());
            assertEquals(200, c.get("/fine").status(), "a handler's failure is not the connection's");
            assertEquals(409, c.get("/refuse").status());
        }
        assertEquals(1, count(Refusal.INTERNAL_ERROR));
    }

    @SuppressWarnings("InfiniteRecursion") // on purpose: a handler that overflows its stack
    private static int recurse(int n) {
        return recurse(n + 1) + 1;
    }

    @Test
    void aHandlerThatThrowsAnErrorIsA500AndTheServerCarriesOn() throws Exception {
        // two slots, one worker: a connection left waiting for an answer would soon lock everyone out
        OpsHttpServer s = start(config().maxConnections(2, 2).workers(1, 1), r -> switch (r.path()) {
            case "/overflow" -> HttpResponse.text(200, "depth " + recurse(0));
            case "/oom" -> throw new OutOfMemoryError("test: no memory left");
            default -> HELLO.handle(r);
        });
        for (int round = 0; round < 2; round++) {
            try (RawHttp c = new RawHttp(s.address())) {
                RawHttp.Answer a = c.get("/overflow");
                assertEquals(500, a.status());
                assertTrue(a.body().contains("StackOverflowError"), a.body());
                assertEquals(200, c.get("/fine").status(), "the connection carries on");
                a = c.get("/oom");
                assertEquals(500, a.status());
                assertTrue(a.body().contains("OutOfMemoryError"), a.body());
            }
        }
        assertEquals(4, count(Refusal.INTERNAL_ERROR));
        servedWithin(s, SERVED);
    }

    @Test
    void aHungHandlerIsCutOffWith503AndItsWorkerReplaced() throws Exception {
        Duration handlerTimeout = Duration.ofSeconds(3);
        CountDownLatch release = new CountDownLatch(1);
        AtomicInteger hung = new AtomicInteger();
        AtomicInteger interrupted = new AtomicInteger();
        AtomicInteger lateActions = new AtomicInteger();
        OpsHttpServer s = start(config().workers(2, 4).handlerTimeout(handlerTimeout), r -> {
            if (r.path().equals("/hang")) {
                hung.incrementAndGet();
                // deaf to interrupts, as a handler stuck in a loop or an uninterruptible call is
                while (true) {
                    try {
                        if (release.await(60, TimeUnit.SECONDS)) {
                            break;
                        }
                    } catch (InterruptedException e) {
                        interrupted.incrementAndGet();
                    }
                }
                return HttpResponse.text(200, "late\n").afterSent(lateActions::incrementAndGet);
            }
            return HELLO.handle(r);
        });
        // both workers hang, and a request waits in the queue behind them
        List<RawHttp> hanging = new ArrayList<>();
        try {
            for (int i = 0; i < 2; i++) {
                hanging.add(new RawHttp(s.address()).send("GET /hang HTTP/1.1\r\nHost: x\r\n\r\n"));
            }
            awaitValue(hung, 2);
            int queuedStatus;
            try (RawHttp queued = new RawHttp(s.address())) {
                queued.send("GET /queued HTTP/1.1\r\nHost: x\r\n\r\n");
                assertCutOff(hanging.subList(0, 2));
                queuedStatus = queued.read().status(); // by a replacement, or 503 if it waited as long as they did
                assertTrue(queuedStatus == 200 || queuedStatus == 503, "queued: " + queuedStatus);
            }
            assertEquals(queuedStatus == 503 ? 3 : 2, count(Refusal.HANDLER_TIMEOUT));
            awaitValue(interrupted, 2); // a handler that heeds its interrupt returns at once
            assertEquals(4, s.workerThreads(), "one replacement for each stuck worker");
            servedWithin(s, SERVED);

            // two more hang, on the replacements: no more replacements (at most one per worker), the pool is stuck
            for (int i = 0; i < 2; i++) {
                hanging.add(new RawHttp(s.address()).send("GET /hang HTTP/1.1\r\nHost: x\r\n\r\n"));
            }
            awaitValue(hung, 4);
            assertCutOff(hanging.subList(2, 4));
            assertEquals(4, s.workerThreads(), "written-off threads are bounded");

            // the four come back: their answers go nowhere, their actions do not run, the pool shrinks to its size
            release.countDown();
            long deadline = System.nanoTime() + SLACK.toNanos();
            while (s.workerThreads() > 2 && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            assertEquals(2, s.workerThreads());
            servedWithin(s, SERVED);
            assertEquals(0, lateActions.get(), "the action of an answer cut off by the handler timeout never runs");
        } finally {
            release.countDown();
            for (RawHttp c : hanging) {
                c.close();
            }
        }
    }

    /** Each got a 503 and was closed at the handler timeout, well before the client's 10 s read timeout. */
    private static void assertCutOff(List<RawHttp> hanging) throws IOException {
        for (RawHttp c : hanging) {
            RawHttp.Answer a = c.read();
            assertEquals(503, a.status(), a.head());
            assertEquals("close", a.header("Connection"));
            assertTrue(c.closedByServer());
        }
    }

    private static void awaitValue(AtomicInteger value, int n) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (value.get() < n && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertEquals(n, value.get());
    }

    /**
     * Until the answer fills {@code c}'s receive buffer: bytes arrived and no more come (two samples 50 ms apart), so
     * the server, if it has more to write, waits on a full socket before the client reads. Returns the bytes there.
     */
    private static int awaitFullReceiveBuffer(RawHttp c) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        int before = -1;
        while (true) {
            int now = c.socket.getInputStream().available();
            if (now > 0 && now == before) {
                return now;
            }
            assertTrue(System.nanoTime() < deadline, "the answer never filled the client's buffer: " + now + " bytes");
            before = now;
            Thread.sleep(50);
        }
    }

    @Test
    void anActionThatStopsTheServerRunsAfterItsAnswerIsOut() throws Exception {
        OpsHttpServer[] self = new OpsHttpServer[1];
        CountDownLatch stopped = new CountDownLatch(1);
        byte[] body = new byte[4 << 20]; // larger than socket buffers: written in several rounds
        self[0] = start(config(), r -> new HttpResponse(202, HttpResponse.TEXT, body, List.of()).afterSent(() -> {
            self[0].close(); // as shutdown does: the process exits, stopping this server
            stopped.countDown();
        }));
        try (RawHttp c = new RawHttp(self[0].address())) {
            c.send("POST /shutdown HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
            int buffered = awaitFullReceiveBuffer(c);
            assertTrue(buffered < body.length, "the whole answer fit in the socket (" + buffered
                    + " bytes): the server never waited on it");
            RawHttp.Answer a = c.read();
            assertEquals(202, a.status());
            assertEquals(body.length, a.body().length(), "the whole answer arrived before the server stopped");
        }
        assertTrue(stopped.await(10, TimeUnit.SECONDS));
    }

    @Test
    void closeStopsListeningAndDropsConnections() throws Exception {
        OpsHttpServer s = start(config(), HELLO);
        RawHttp idle = new RawHttp(s.address());
        awaitOpen(s, 1);
        s.close();
        assertTrue(idle.closedByServer());
        idle.close();
        assertFalse(canConnect(s.address()));
    }

    private static boolean canConnect(InetSocketAddress a) {
        try (Socket ignored = new Socket(a.getAddress(), a.getPort())) {
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    @Test
    void aTakenAddressIsABindException() throws Exception {
        OpsHttpServer s = start(config(), HELLO);
        try {
            OpsHttpServer.start(OpsHttpConfig.builder("test", s.address()).build(), HELLO, metrics).close();
            throw new AssertionError("bound a taken port");
        } catch (BindException expected) {
            // MetricsEndpoint tells a taken default port from other failures by this type
        }
    }
}
