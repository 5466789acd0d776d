package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.IOException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;

import static dev.rbridge.cli.adversarial.WellBehavedHttpClient.address;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Admin abuse on loopback, against a deployment whose memserver has no token (the setting in which admin was open
 * before): operations that change state sent without a token, from a web page (Origin), through DNS rebinding
 * (a Host that is not a loopback name), and by GET. Each must be refused with its status, change nothing (the
 * memserver keeps serving and does not drain), and leave the well-behaved HTTP client and the libnbd client
 * served within 2 s.
 */
@Timeout(180)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Tag("fault")
class OpsHttpAdminAttackTest {
    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    private ServeCluster cluster;
    private Bystanders bystanders;
    private String memAdmin;

    @BeforeAll
    void start() throws Exception {
        cluster = LOGS.watch(ServeCluster.builder("ops-http-admin-attack").memservers(1).metrics(true)
                .memserverAdmin(true).volume("disk,size=64M").start());
        memAdmin = cluster.memserver(0).adminAddress();
        bystanders = Bystanders.start(cluster.uri("disk"), List.of(
                new WellBehavedHttpClient.Target("bridge /readyz", cluster.metricsAddress(), "/readyz", null),
                new WellBehavedHttpClient.Target("bridge admin /volumes", cluster.adminAddress(), "/volumes", null),
                new WellBehavedHttpClient.Target("memserver /readyz", cluster.memserver(0).metricsAddress(), "/readyz",
                        null),
                new WellBehavedHttpClient.Target("memserver admin /stats", memAdmin, "/stats", null)));
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

    /** Nothing changed: the memserver runs, does not drain, and both clients are served as before. */
    @AfterEach
    void nothingChanged() throws Exception {
        assertTrue(cluster.memserver(0).isAlive(), "the memserver is still running");
        bystanders.servedThroughoutAndAfter();
        assertEquals(0.0, Scrape.sum(Scrape.metrics(cluster.memserver(0).metricsAddress()),
                "rbridge_memserver_draining"), "the memserver is not draining");
        ClusterIntegrity.assertIntact(cluster);
    }

    private record Answer(int status, String text) {
    }

    /** One request, exactly as given (Host included), on its own connection. */
    private static Answer send(String address, String method, String path, String... headers) throws IOException {
        StringBuilder r = new StringBuilder(method).append(' ').append(path).append(" HTTP/1.1\r\n");
        boolean host = false;
        for (int i = 0; i < headers.length; i += 2) {
            r.append(headers[i]).append(": ").append(headers[i + 1]).append("\r\n");
            host |= headers[i].equalsIgnoreCase("Host");
        }
        if (!host) {
            r.append("Host: ").append(address).append("\r\n");
        }
        r.append("Content-Length: 0\r\nConnection: close\r\n\r\n");
        try (Socket s = new Socket()) {
            s.connect(address(address), 2000);
            s.setSoTimeout(5000);
            s.getOutputStream().write(r.toString().getBytes(StandardCharsets.US_ASCII));
            String text = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            return new Answer(Integer.parseInt(text.substring(9, 12)), text);
        }
    }

    private static void assertRefused(Answer a, int status, String why, String what) {
        assertEquals(status, a.status(), what + ": " + a.text());
        assertTrue(a.text().contains(why), what + " says why (" + why + "): " + a.text());
    }

    @Test
    void shutdownDrainRevokeAndDisconnectWithoutATokenAreOffOnLoopback() throws Exception {
        for (String path : List.of("/shutdown", "/drain", "/regions/1/revoke", "/clients/1/disconnect")) {
            assertRefused(send(memAdmin, "POST", path), 403, "--token-file", "POST " + path + " without a token");
        }
        assertRefused(send(memAdmin, "POST", "/drain", "Authorization", "Bearer guess"), 403, "--token-file",
                "POST /drain with a made-up token");
    }

    @Test
    void requestsFromWebPagesAreRefused() throws Exception {
        assertRefused(send(memAdmin, "POST", "/shutdown", "Origin", "http://evil.example"), 403, "web pages",
                "a page's POST /shutdown");
        assertRefused(send(memAdmin, "POST", "/drain", "Origin", "http://evil.example"), 403, "web pages",
                "a page's POST /drain");
        assertRefused(send(memAdmin, "GET", "/regions", "Origin", "http://evil.example"), 403, "web pages",
                "a page reading /regions");
        assertRefused(send(memAdmin, "GET", "/clients", "Sec-Fetch-Site", "cross-site"), 403, "web pages",
                "a page's no-cors read of /clients");
        assertRefused(send(cluster.adminAddress(), "GET", "/volumes", "Origin", "http://evil.example"), 403,
                "web pages", "a page reading the bridge's /volumes");
    }

    @Test
    void dnsRebindingIsRefused() throws Exception {
        assertRefused(send(memAdmin, "POST", "/shutdown", "Host", "evil.example"), 403, "not a loopback name",
                "POST /shutdown for Host evil.example");
        assertRefused(send(memAdmin, "POST", "/drain", "Host", "evil.example:" + address(memAdmin).getPort()), 403,
                "not a loopback name", "POST /drain for Host evil.example:PORT");
        assertRefused(send(memAdmin, "GET", "/leases", "Host", "evil.example"), 403, "not a loopback name",
                "GET /leases for Host evil.example");
        assertRefused(send(cluster.adminAddress(), "GET", "/memservers", "Host", "evil.example"), 403,
                "not a loopback name", "the bridge's GET /memservers for Host evil.example");
    }

    @Test
    void getOnAnOperationThatChangesStateIsRefusedWith405() throws Exception {
        for (String path : List.of("/shutdown", "/drain", "/regions/1/revoke", "/clients/1/disconnect")) {
            Answer a = send(memAdmin, "GET", path);
            assertRefused(a, 405, "POST", "GET " + path);
            assertTrue(a.text().contains("\r\nAllow: POST\r\n"), a.text());
        }
    }
}
