package dev.rbridge.ops.http;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The server against peers that misbehave on purpose: each test keeps a well-behaved client asking beside the
 * attack and checks it is answered at once, and that the attack is cut off and counted.
 */
@Timeout(60)
class OpsHttpServerTest {
    /** Short timeouts so a test sees them fire; a well-behaved request takes milliseconds. */
    private static final Duration REQUEST = Duration.ofMillis(1500);
    private static final Duration IDLE = Duration.ofMillis(1500);
    private static final Duration WRITE = Duration.ofMillis(1500);
    private static final Duration LINGER = Duration.ofMillis(500);

    private final Map<Refusal, AtomicLong> counted = new ConcurrentHashMap<>();
    private final OpsHttpMetrics metrics = r -> counted.computeIfAbsent(r, x -> new AtomicLong()).incrementAndGet();
    private final List<OpsHttpServer> servers = new ArrayList<>();

    private long count(Refusal r) {
        AtomicLong n = counted.get(r);
        return n == null ? 0 : n.get();
    }

    private OpsHttpServer start(OpsHttpConfig.Builder b, Handler h) throws IOException {
        OpsHttpServer s = OpsHttpServer.start(b.timeouts(REQUEST, IDLE, WRITE, LINGER).build(), h, metrics);
        servers.add(s);
        return s;
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
        OpsHttpServer s = start(config().workers(1, 1), HELLO);
        List<RawHttp> slow = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            slow.add(new RawHttp(s.address()).send("GET /slow HTTP/1.1\r\n"));
        }
        long t0 = System.nanoTime();
        String rest = "Host: 127.0.0.1\r\nX-Dribble: ";
        for (int i = 0; System.nanoTime() - t0 < REQUEST.toNanos() - TimeUnit.MILLISECONDS.toNanos(300); i++) {
            for (RawHttp c : slow) {
                c.send(String.valueOf(rest.charAt(i % rest.length())));
            }
            servedWithin(s, Duration.ofMillis(500));
            Thread.sleep(50);
        }
        for (RawHttp c : slow) {
            RawHttp.Answer a = c.read();
            assertEquals(408, a.status(), a.head());
            assertTrue(c.closedByServer());
            c.close();
        }
        long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(took < REQUEST.toMillis() + 1000, "cut off after " + took + " ms");
        assertEquals(5, count(Refusal.REQUEST_TIMEOUT));
        servedWithin(s, Duration.ofMillis(500));
    }

    @Test
    void silentConnectionsAreEvictedOldestFirstAndTimeOut() throws Exception {
        OpsHttpServer s = start(config().maxConnections(8, 8), HELLO);
        List<RawHttp> silent = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            silent.add(new RawHttp(s.address()));
            Thread.sleep(5); // a distinct age each
        }
        awaitOpen(s, 8);
        servedWithin(s, Duration.ofMillis(500)); // it takes the oldest silent connection's slot
        assertTrue(silent.getFirst().closedByServer(), "the oldest silent connection made room");
        assertEquals(1, count(Refusal.EVICTED));
        // the rest go at the idle timeout, counted as connections that never asked anything
        for (RawHttp c : silent.subList(1, silent.size())) {
            c.socket.setSoTimeout((int) IDLE.toMillis() + 2000);
            assertTrue(c.closedByServer());
            c.close();
        }
        assertEquals(7, count(Refusal.IDLE_TIMEOUT));
        // a keep-alive connection that asked something also goes quietly at the idle timeout, uncounted
        try (RawHttp c = new RawHttp(s.address())) {
            c.get("/x");
            c.socket.setSoTimeout((int) IDLE.toMillis() + 2000);
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
            Thread.sleep(5);
        }
        List<RawHttp> theirs = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            theirs.add(new RawHttp(s.address(), "127.0.0.2"));
            Thread.sleep(5);
        }
        awaitOpen(s, 6);
        for (int i = 0; i < 3; i++) { // 127.0.0.2 keeps opening: it evicts its own oldest each time
            theirs.add(new RawHttp(s.address(), "127.0.0.2"));
            Thread.sleep(20);
        }
        awaitOpen(s, 6);
        assertEquals(3, count(Refusal.EVICTED));
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
    void whenEveryConnectionIsBusyANewOneGetsA503AndTheRestFinish() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        OpsHttpServer s = start(config().maxConnections(2, 2).workers(1, 1), r -> {
            release.await(30, TimeUnit.SECONDS);
            return HttpResponse.text(200, "done\n");
        });
        // two peers, so the global cap is what the third meets
        try (RawHttp a = new RawHttp(s.address(), "127.0.0.2"); RawHttp b = new RawHttp(s.address(), "127.0.0.3")) {
            a.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
            b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n"); // queued: also being answered, so not evictable
            Thread.sleep(200);
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
        CountDownLatch release = new CountDownLatch(1);
        OpsHttpServer s = start(config().workers(1, 1), r -> {
            release.await(30, TimeUnit.SECONDS);
            return HttpResponse.text(200, "done\n");
        });
        try (RawHttp a = new RawHttp(s.address()); RawHttp b = new RawHttp(s.address());
             RawHttp c = new RawHttp(s.address())) {
            a.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
            Thread.sleep(100);
            b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
            Thread.sleep(100);
            assertEquals(503, c.get("/c").status());
            assertEquals(1, count(Refusal.BUSY));
            release.countDown();
            assertEquals(200, a.read().status());
            assertEquals(200, b.read().status());
        }
    }

    @Test
    void oversizedRequestsGetTheirStatusReadableBeforeTheClose() throws Exception {
        OpsHttpServer s = start(config().limits(128, 256, 8, 16), HELLO);
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
        servedWithin(s, Duration.ofMillis(500));
    }

    @Test
    void aPeerThatDoesNotReadItsAnswerIsCutOffAtTheWriteTimeout() throws Exception {
        byte[] big = new byte[32 << 20];
        java.util.Arrays.fill(big, (byte) 'a');
        OpsHttpServer s = start(config(), r -> r.path().equals("/big")
                ? new HttpResponse(200, HttpResponse.TEXT, big, List.of()) : HELLO.handle(r));
        try (RawHttp c = new RawHttp(s.address())) {
            c.socket.setReceiveBufferSize(4096);
            c.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
            long t0 = System.nanoTime();
            while (count(Refusal.WRITE_TIMEOUT) == 0 && System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(10)) {
                servedWithin(s, Duration.ofMillis(500));
                Thread.sleep(100);
            }
            assertEquals(1, count(Refusal.WRITE_TIMEOUT));
        }
        servedWithin(s, Duration.ofMillis(500));
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
            Thread.sleep(300); // let the server block on a full socket buffer before the client reads
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
        try (java.net.Socket ignored = new java.net.Socket(a.getAddress(), a.getPort())) {
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
        } catch (java.net.BindException expected) {
            // MetricsEndpoint tells a taken default port from other failures by this type
        }
    }
}
