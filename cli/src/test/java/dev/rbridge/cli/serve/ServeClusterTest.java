package dev.rbridge.cli.serve;

import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link ServeCluster} itself, and the failures it exists to cause: a memserver killed with SIGKILL and started again
 * (degraded, then rebuilt), a memserver frozen with SIGSTOP (taken out after --timeout, back after SIGCONT), and the
 * bridge stopped or killed and started again with the same arguments (same data, same URI). Data is written and
 * checked with nbdsh from a seeded pattern, so each check is independent of the one that wrote it.
 */
@Timeout(300)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Tag("fault")
class ServeClusterTest {
    private static final int MiB = 1 << 20;
    private static final Duration SETTLE = Duration.ofSeconds(60);
    private static final String UNCLEAN = "the previous bridge did not shut down cleanly";

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    static ServeCluster cluster;

    @BeforeAll
    static void start() throws IOException {
        PeerTool.require("nbdsh", "libnbd-bin");
        cluster = LOGS.watch(ServeCluster.builder("cluster")
                .memservers(2)
                .capacity("256M")
                .token("s3cret")
                .timeout("2")
                .bridgeArgs("--lease", "3")
                .volume("v,size=64M,replicas=2,slab=4M")
                .start());
    }

    @AfterAll
    static void stop() {
        if (cluster != null) {
            cluster.close();
        }
    }

    /** Writes {@code length} bytes of the pattern seeded {@code seed} at {@code offset}. */
    private static void write(int seed, long offset, int length) {
        PeerTool.check(60, "nbdsh", "-u", cluster.uri("v"), "-c",
                "import random\nh.pwrite(random.Random(%d).randbytes(%d), %d)".formatted(seed, length, offset));
    }

    /** Checks that the pattern seeded {@code seed} is at {@code offset}. */
    private static void check(int seed, long offset, int length) {
        PeerTool.check(60, "nbdsh", "-u", cluster.uri("v"), "-c", """
                import random
                want = random.Random(%d).randbytes(%d)
                got = h.pread(%d, %d)
                if got != want:
                    i = next(k for k in range(len(got)) if got[k] != want[k])
                    raise SystemExit("differs at offset %%d: want %%d got %%d" %% (%d + i, want[i], got[i]))
                """.formatted(seed, length, length, offset, offset));
    }

    @SuppressWarnings("unchecked")
    private static boolean volumeState(Object volumes, String state) {
        Map<String, Object> v = ((List<Map<String, Object>>) volumes).getFirst();
        return state.equals(v.get("state"));
    }

    private static void assertHealthyOnBothMemservers() {
        cluster.awaitAdmin("/volumes", v -> volumeState(v, "healthy"), SETTLE);
        List<Map<String, Object>> slabs = cluster.slabs("v", false);
        assertTrue(!slabs.isEmpty(), "slabs: " + slabs);
        for (Map<String, Object> s : slabs) {
            List<String> on = ServeCluster.replicaServers(s);
            assertEquals(2, new HashSet<>(on).size(), "two replicas on two memservers: " + s);
        }
    }

    @Test
    @Order(1)
    void startsServesAndReportsThroughTheAdminInterface() {
        assertEquals(2, cluster.memservers().size());
        assertNotEquals(cluster.memserver(0).address(), cluster.memserver(1).address());
        assertTrue(cluster.uri("v").startsWith("nbd://127.0.0.1:" + cluster.nbdPort() + "/"), cluster.uri("v"));
        write(1, 0, 16 * MiB);
        write(2, 40 * MiB + 12345, 3 * MiB);
        check(1, 0, 16 * MiB);
        check(2, 40 * MiB + 12345, 3 * MiB);
        Map<String, Object> v = cluster.volume("v");
        assertEquals(5L, v.get("allocated"), "slabs 0-3 and 10: " + v);
        assertHealthyOnBothMemservers();
        assertEquals(2, cluster.memserverStatus().size());
        assertEquals(0L, cluster.rebuild().get("queued"));
    }

    @Test
    @Order(2)
    void aKilledMemserverLeavesTheVolumeDegradedAndARestartedOneIsRebuilt() throws IOException {
        ServeCluster.Memserver victim = cluster.memserver(1);
        long pid = victim.pid();
        victim.kill9();
        assertTrue(ProcessHandle.of(pid).isEmpty() || !ProcessHandle.of(pid).get().isAlive(), "SIGKILL took it");
        write(3, 20 * MiB, MiB); // a write reaches the survivor and takes the dead replica out
        cluster.awaitAdmin("/volumes", v -> volumeState(v, "degraded"), SETTLE);
        check(1, 0, 16 * MiB);
        check(3, 20 * MiB, MiB);

        victim.restart();
        assertNotEquals(pid, victim.pid());
        assertHealthyOnBothMemservers();
        check(1, 0, 16 * MiB);
        check(2, 40 * MiB + 12345, 3 * MiB);
        check(3, 20 * MiB, MiB);
    }

    @Test
    @Order(3)
    void aFrozenMemserverIsTakenOutAfterTheTimeoutAndComesBackAfterSigcont() {
        ServeCluster.Memserver frozen = cluster.memserver(0);
        frozen.freeze();
        try {
            long t0 = System.nanoTime();
            write(4, 24 * MiB, MiB);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms < 15_000, "the write waited " + ms + " ms for the frozen replica (--timeout 2)");
            cluster.awaitAdmin("/volumes", v -> volumeState(v, "degraded"), SETTLE);
            check(4, 24 * MiB, MiB);
            check(1, 0, 16 * MiB);
        } finally {
            frozen.thaw();
        }
        assertTrue(frozen.isAlive());
        assertHealthyOnBothMemservers();
        check(4, 24 * MiB, MiB);
        check(2, 40 * MiB + 12345, 3 * MiB);
    }

    @Test
    @Order(4)
    void aRestartedBridgeServesTheSameDataAtTheSameUri() throws IOException {
        String uri = cluster.uri("v");
        long pid = cluster.bridge().pid();
        cluster.restartBridge(); // SIGTERM: the lease is given back at once
        assertNotEquals(pid, cluster.bridge().pid());
        // A lease the old process did not give back would still be let go when its connections closed, so the new
        // one would start anyway; what tells the two apart is that it then takes the exit for an unclean one.
        assertTrue(!cluster.bridge().log().contains(UNCLEAN), "the stopped bridge did not give its lease back:\n"
                + cluster.bridge().log());
        assertEquals(uri, cluster.uri("v"));
        check(1, 0, 16 * MiB);
        check(4, 24 * MiB, MiB);
        assertHealthyOnBothMemservers();

        cluster.killBridge(); // SIGKILL: startBridge waits out the lease if it must
        cluster.startBridge();
        assertTrue(cluster.bridge().log().contains(UNCLEAN), "a SIGKILLed bridge gave nothing back, and the new one"
                + " must see that (else the check after the graceful restart could not fail):\n"
                + cluster.bridge().log());
        check(2, 40 * MiB + 12345, 3 * MiB);
        check(3, 20 * MiB, MiB);
        assertHealthyOnBothMemservers();
        assertEquals(7L, cluster.volume("v").get("allocated"), "slabs 0-3, 5, 6, 10");
    }
    private static HttpResponse<String> adminRequest(String method, String path, String authorization)
            throws IOException, InterruptedException {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://" + cluster.adminAddress() + path))
                .timeout(Duration.ofSeconds(10)).method(method, HttpRequest.BodyPublishers.noBody());
        if (authorization != null) {
            b.header("Authorization", authorization);
        }
        try (HttpClient http = HttpClient.newHttpClient()) {
            return http.send(b.build(), HttpResponse.BodyHandlers.ofString());
        }
    }

    /**
     * The bridge was started with a token: its admin interface answers neither reads nor changes without it (401
     * with a Bearer challenge), and a refused change changes nothing. The same read with the token is served, so the
     * refusals are the token's doing, not a broken route.
     */
    @Test
    @Order(5)
    void theAdminInterfaceRefusesRequestsWithoutTheTokenWith401() throws Exception {
        String victim = cluster.memserver(0).address();
        for (String auth : new String[]{null, "Bearer wrong", "Bearer s3cre", "s3cret"}) {
            HttpResponse<String> read = adminRequest("GET", "/volumes", auth);
            assertEquals(401, read.statusCode(), "GET /volumes with Authorization " + auth + ": " + read.body());
            assertEquals("Bearer", read.headers().firstValue("WWW-Authenticate").orElse(null),
                    read.headers().toString());
            assertTrue(!read.body().contains("\"healthy\""), "a refused read leaks nothing: " + read.body());
            HttpResponse<String> drain = adminRequest("POST", "/memservers/" + victim + "/drain", auth);
            assertEquals(401, drain.statusCode(), "POST drain with Authorization " + auth + ": " + drain.body());
        }
        HttpResponse<String> ok = adminRequest("GET", "/memservers", "Bearer s3cret");
        assertEquals(200, ok.statusCode(), ok.body());
        assertTrue(ok.body().contains(victim), ok.body());
        for (Map<String, Object> m : cluster.memserverStatus()) {
            assertNotEquals("draining", m.get("state"), "a refused drain started nothing: " + m);
            assertNotEquals(Boolean.TRUE, m.get("draining"), "a refused drain started nothing: " + m);
        }
    }
}
