package dev.rbridge.cli.metrics;

import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Over-commit is not silent: a volume of 128M with two replicas on two 32M memservers starts with a WARN naming the
 * numbers, exports them, and lists a readiness warning; writing until the memservers are full fails those writes
 * with ENOSPC, which is logged at WARN, counted, listed in /readyz and fires RbridgeVolumeOutOfSpace in a real
 * Prometheus running the project's rules.
 */
@Timeout(300)
@Tag("interop")
class CapacityTest {
    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    @Test
    void overCommitIsWarnedAndOutOfSpaceIsLoggedCountedAndAlerted() throws Exception {
        PeerTool.require("prometheus", "prometheus");
        PeerTool.check(30, "python3", "-c", "import nbd");
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("capacity").memservers(2).capacity("32M")
                .volume("disk,size=128M,replicas=2,slab=4M").metrics(true).start())) {
            String bridgeLog = c.bridge().log();
            assertTrue(bridgeLog.contains("over-committed") && bridgeLog.contains("268435456")
                    && bridgeLog.contains("67108864"), bridgeLog);
            String metrics = http(c, "/metrics");
            assertTrue(metrics.contains("rbridge_bridge_provisioned_bytes 2.68435456E8"), metrics);
            assertTrue(metrics.contains("rbridge_bridge_capacity_live_bytes 6.7108864E7"), metrics);
            assertTrue(http(c, "/readyz").contains("over-committed"), http(c, "/readyz"));

            Path dir = Files.createDirectories(c.logDir().resolve("prometheus"));
            try (PrometheusProcess prom = PrometheusProcess.start(dir, c.metricsAddress(),
                    c.memservers().stream().map(ServeCluster.Memserver::metricsAddress).toList())) {
                // The counter must be seen at 0 first: increase() needs two samples.
                long scraped = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                while (!prom.get(prom.url() + "/api/v1/query?query=rbridge_volume_enospc_total").body()
                        .contains("\"export\":\"disk\"")) {
                    if (System.nanoTime() > scraped) {
                        fail("Prometheus did not scrape the bridge within 60 s");
                    }
                    Thread.sleep(250);
                }
                Thread.sleep(1500);
                // 4 KiB into every slab: 32 slabs of 4M on 2 x 32M at two replicas each: about half find no room.
                String out = PeerTool.check(120, "nbdsh", "-u", c.uri("disk"), "-c", String.join("\n",
                        "import errno",
                        "ok = nospc = 0",
                        "for slab in range(32):",
                        "    try:",
                        "        h.pwrite(b'x' * 4096, slab * 4 * 1024 * 1024)",
                        "        ok += 1",
                        "    except nbd.Error as e:",
                        "        assert 'ENOSPC' in str(e), e",
                        "        nospc += 1",
                        "print('ok', ok, 'nospc', nospc)"));
                // Some slabs fit (the writes that found room work), the rest fail with ENOSPC, and only with it.
                assertTrue(out.matches("(?s).*ok [1-9]\\d* nospc [1-9]\\d*.*"), out);
                int failed = Integer.parseInt(out.replaceAll("(?s).*nospc (\\d+).*", "$1"));
                assertTrue(http(c, "/metrics").contains("rbridge_volume_enospc_total{export=\"disk\"} "
                        + failed + ".0"), http(c, "/metrics"));
                assertTrue(http(c, "/readyz").contains("ENOSPC"), http(c, "/readyz"));
                assertTrue(c.bridge().log().contains("fail with ENOSPC"), c.bridge().log());

                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                while (!"firing".equals(prom.alertState("RbridgeVolumeOutOfSpace"))) {
                    if (System.nanoTime() > deadline) {
                        fail("RbridgeVolumeOutOfSpace did not fire within 60 s: " + prom.alertState(
                                "RbridgeVolumeOutOfSpace"));
                    }
                    Thread.sleep(500);
                }
                assertEquals("pending", prom.alertState("RbridgeOvercommitted"), "for: 15m, so pending");
            }
        }
    }

    private static String http(ServeCluster c, String path) throws Exception {
        return java.net.http.HttpClient.newHttpClient().send(java.net.http.HttpRequest.newBuilder(
                java.net.URI.create("http://" + c.metricsAddress() + path)).build(),
                java.net.http.HttpResponse.BodyHandlers.ofString()).body();
    }
}
