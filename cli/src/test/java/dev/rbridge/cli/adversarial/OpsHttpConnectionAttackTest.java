package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.ops.http.OpsHttpConfig;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static dev.rbridge.cli.adversarial.WellBehavedHttpClient.address;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Connection-level attacks on every ops HTTP port of a real deployment (the bridge's /metrics and admin, the
 * memserver's /metrics and admin, all token-guarded where admin): slow-loris, connections that never send, and
 * oversized request lines, headers and bodies. Beside each attack a well-behaved HTTP client ({@link Bystanders}) asks
 * /metrics, /readyz and an admin GET of both processes on fresh connections, and the shared libnbd client keeps
 * doing I/O through the bridge: both must be served within 2 s throughout, no memserver may be declared down, and
 * every attacking connection must be cut off by a bound.
 */
@Timeout(240)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Tag("fault")
class OpsHttpConnectionAttackTest {
    private static final String TOKEN = "attack-test-token";

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    private ServeCluster cluster;
    private Bystanders bystanders;
    private List<Port> ports;

    /** An attacked port: where, and a path its server answers with 200 to a well-behaved request. */
    record Port(String label, String address, String path) {
    }

    @BeforeAll
    void start() throws Exception {
        cluster = LOGS.watch(ServeCluster.builder("ops-http-attack").memservers(1).token(TOKEN).metrics(true)
                .memserverAdmin(true).volume("disk,size=64M").start());
        ServeCluster.Memserver m = cluster.memserver(0);
        ports = List.of(new Port("bridge metrics", cluster.metricsAddress(), "/metrics"),
                new Port("bridge admin", cluster.adminAddress(), "/volumes"),
                new Port("memserver metrics", m.metricsAddress(), "/metrics"),
                new Port("memserver admin", m.adminAddress(), "/stats"));
        bystanders = Bystanders.start(cluster.uri("disk"), List.of(
                new WellBehavedHttpClient.Target("bridge /metrics", cluster.metricsAddress(), "/metrics", null),
                new WellBehavedHttpClient.Target("bridge /readyz", cluster.metricsAddress(), "/readyz", null),
                new WellBehavedHttpClient.Target("bridge admin /volumes", cluster.adminAddress(), "/volumes", TOKEN),
                new WellBehavedHttpClient.Target("memserver /metrics", m.metricsAddress(), "/metrics", null),
                new WellBehavedHttpClient.Target("memserver admin /stats", m.adminAddress(), "/stats", TOKEN)));
    }

    @AfterAll
    void stop() throws Exception {
        if (bystanders != null) {
            bystanders.close();
        }
        if (cluster != null) {
            cluster.close();
        }
    }

    @BeforeEach
    void servedBefore() throws Exception {
        bystanders.servedBefore();
    }

    /** The well-behaved clients were served throughout, and are served as before now; nothing was degraded. */
    private void servedThroughoutAndAfter() throws Exception {
        bystanders.servedThroughoutAndAfter();
        ClusterIntegrity.assertIntact(cluster);
    }

    @Test
    void slowLorisOnEveryPortIsCutOffWith408WhileOthersAreServed() throws Exception {
        List<Hostile> slow = new ArrayList<>();
        double metricsBefore = refusals(cluster.metricsAddress(), "request_timeout", "metrics");
        double adminBefore = refusals(cluster.metricsAddress(), "request_timeout", "admin");
        try {
            for (Port p : ports) {
                for (int i = 0; i < 8; i++) { // under the per-peer cap: the request timeout is what must cut them
                    Hostile h = Hostile.open(p.label(), p.address());
                    h.send("GET " + p.path() + " HTTP/1.1\r\n");
                    slow.add(h);
                }
            }
            byte[] drip = ("Host: 127.0.0.1\r\nAuthorization: Bearer " + TOKEN + "\r\nX-Slow: " + "s".repeat(64)
                    + "\r\n").getBytes(StandardCharsets.US_ASCII);
            long start = System.nanoTime();
            for (int tick = 0; System.nanoTime() - start < TimeUnit.SECONDS.toNanos(16); tick++) {
                boolean open = false;
                for (Hostile h : slow) {
                    if (tick % 4 == 0) { // one byte a second
                        h.send(new byte[]{drip[(tick / 4) % drip.length]});
                    }
                    h.poll();
                    open |= !h.closed();
                }
                if (!open) {
                    break;
                }
                Thread.sleep(250);
            }
            servedThroughoutAndAfter();
            long limit = OpsHttpConfig.REQUEST_TIMEOUT.toMillis() + 3000;
            for (Hostile h : slow) {
                assertTrue(h.closed(), h + " is still open after 16 s of a byte a second");
                assertTrue(h.statusLine().startsWith("HTTP/1.1 408 "), h + " got " + h.statusLine());
                assertTrue(h.openMillis() <= limit, h + " was cut off after " + h.openMillis() + " ms");
            }
            assertEquals(8.0, refusals(cluster.metricsAddress(), "request_timeout", "metrics") - metricsBefore,
                    "counted on the bridge's metrics server");
            assertEquals(8.0, refusals(cluster.metricsAddress(), "request_timeout", "admin") - adminBefore,
                    "counted on the bridge's admin server");
        } finally {
            slow.forEach(Hostile::close);
        }
    }

    @Test
    void connectionsThatNeverSendAreBoundedEvictedAndTimedOut() throws Exception {
        int perPort = 200;
        List<List<Hostile>> silent = new ArrayList<>();
        double evictedBefore = refusals(cluster.metricsAddress(), "evicted", "metrics");
        double idleBefore = refusals(cluster.metricsAddress(), "idle_timeout", "admin");
        try {
            for (Port p : ports) {
                List<Hostile> mine = new ArrayList<>();
                for (int i = 0; i < perPort; i++) {
                    mine.add(Hostile.open(p.label(), p.address()));
                }
                silent.add(mine);
            }
            Thread.sleep(1500);
            for (int i = 0; i < ports.size(); i++) {
                long open = silent.get(i).stream().peek(Hostile::poll).filter(h -> !h.closed()).count();
                assertTrue(open <= OpsHttpConfig.MAX_CONNECTIONS_PER_PEER, ports.get(i).label() + " holds " + open
                        + " of " + perPort + " silent connections from one peer (cap "
                        + OpsHttpConfig.MAX_CONNECTIONS_PER_PEER + ")");
            }
            // the ones left go at the idle timeout
            long deadline = System.nanoTime() + OpsHttpConfig.IDLE_TIMEOUT.toNanos() + TimeUnit.SECONDS.toNanos(4);
            long open;
            do {
                Thread.sleep(250);
                open = silent.stream().flatMap(List::stream).peek(Hostile::poll).filter(h -> !h.closed()).count();
            } while (open > 0 && System.nanoTime() < deadline);
            assertEquals(0, open, "silent connections still open after the idle timeout");
            servedThroughoutAndAfter();
            assertTrue(refusals(cluster.metricsAddress(), "evicted", "metrics") - evictedBefore
                    >= perPort - OpsHttpConfig.MAX_CONNECTIONS_PER_PEER, "evictions counted");
            assertTrue(refusals(cluster.metricsAddress(), "idle_timeout", "admin") - idleBefore >= 1,
                    "idle timeouts counted");
        } finally {
            silent.stream().flatMap(List::stream).forEach(Hostile::close);
        }
    }

    @Test
    void oversizedRequestLinesHeadersAndBodiesGetTheirStatusAtOnce() throws Exception {
        String line = "GET /" + "a".repeat(1 << 20) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        StringBuilder headers = new StringBuilder("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        for (int i = 0; i < 1024; i++) {
            headers.append("X-Pad-").append(i).append(": ").append("b".repeat(1000)).append("\r\n");
        }
        headers.append("\r\n");
        String body = "POST /drain HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + TOKEN
                + "\r\nContent-Length: 1073741824\r\n\r\n" + "c".repeat(8 << 20);
        for (Port p : ports) {
            assertStatus(p, line, 414);
            assertStatus(p, headers.toString(), 431);
            assertStatus(p, body, 413);
        }
        assertTrue(cluster.memserver(0).isAlive());
        servedThroughoutAndAfter();
        assertEquals(0.0, Scrape.sum(Scrape.metrics(cluster.memserver(0).metricsAddress()),
                "rbridge_memserver_draining"), "the oversized POST /drain did nothing");
    }

    /** rbridge_http_refusals_total of one reason and server, from the /metrics at {@code address}. */
    private static double refusals(String address, String reason, String server) throws Exception {
        return Scrape.sum(Scrape.metrics(address), "rbridge_http_refusals_total", "reason=\"" + reason + "\"",
                "server=\"" + server + "\"");
    }

    /** Sends {@code request} (from another thread: the server may answer before it has read it all). */
    private static void assertStatus(Port p, String request, int expected) throws Exception {
        long t0 = System.nanoTime();
        try (Socket s = new Socket()) {
            s.connect(address(p.address()), 2000);
            s.setSoTimeout(5000);
            byte[] bytes = request.getBytes(StandardCharsets.ISO_8859_1);
            Thread writer = Thread.ofPlatform().daemon().start(() -> {
                try {
                    OutputStream out = s.getOutputStream();
                    out.write(bytes);
                    out.flush();
                } catch (IOException e) {
                    // the server closed after answering: expected for what it refuses
                }
            });
            String status = statusLine(s.getInputStream());
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTrue(status.startsWith("HTTP/1.1 " + expected + " "), p.label() + ": " + request.length()
                    + " bytes answered '" + status + "', expected " + expected);
            assertTrue(ms < 5000, p.label() + ": answered after " + ms + " ms");
            s.close();
            writer.join(10_000);
        }
    }

    private static String statusLine(InputStream in) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        try {
            for (int c; (c = in.read()) >= 0 && c != '\n' && b.size() < 200;) {
                b.write(c);
            }
        } catch (IOException e) {
            return b.size() > 0 ? b.toString(StandardCharsets.ISO_8859_1).trim() : "(no answer: " + e + ")";
        }
        return b.size() > 0 ? b.toString(StandardCharsets.ISO_8859_1).trim() : "(closed without an answer)";
    }

    // ------------------------------------------------------------------------------------------------ fixtures

    /** An attacking connection: non-blocking, so a test drives hundreds from one thread and never hangs on one. */
    static final class Hostile implements AutoCloseable {
        private final String label;
        private final SocketChannel ch;
        private final long opened = System.nanoTime();
        private final ByteArrayOutputStream received = new ByteArrayOutputStream();
        private long closedAt;

        private Hostile(String label, SocketChannel ch) {
            this.label = label;
            this.ch = ch;
        }

        static Hostile open(String label, String address) throws IOException {
            SocketChannel ch = SocketChannel.open();
            ch.socket().connect(address(address), 5000);
            ch.configureBlocking(false);
            return new Hostile(label, ch);
        }

        void send(String s) {
            send(s.getBytes(StandardCharsets.ISO_8859_1));
        }

        void send(byte[] b) {
            if (closedAt != 0) {
                return;
            }
            try {
                ch.write(ByteBuffer.wrap(b));
            } catch (IOException e) {
                poll(); // the answer may be waiting to be read before the reset
                gone();
            }
        }

        /** Reads whatever arrived; notes when the server closed. */
        void poll() {
            if (closedAt != 0) {
                return;
            }
            ByteBuffer buf = ByteBuffer.allocate(4096);
            try {
                int n;
                while ((n = ch.read(buf)) > 0) {
                    received.write(buf.array(), 0, n);
                    buf.clear();
                }
                if (n < 0) {
                    gone();
                }
            } catch (IOException e) {
                gone();
            }
        }

        private void gone() {
            if (closedAt == 0) {
                closedAt = System.nanoTime();
            }
        }

        boolean closed() {
            return closedAt != 0;
        }

        long openMillis() {
            return TimeUnit.NANOSECONDS.toMillis((closedAt == 0 ? System.nanoTime() : closedAt) - opened);
        }

        String statusLine() {
            String text = received.toString(StandardCharsets.ISO_8859_1);
            int end = text.indexOf("\r\n");
            return end < 0 ? text : text.substring(0, end);
        }

        @Override
        public void close() {
            try {
                ch.close();
            } catch (IOException e) {
                // a test socket; nothing to do
            }
        }

        @Override
        public String toString() {
            return "hostile connection to " + label;
        }
    }
}
