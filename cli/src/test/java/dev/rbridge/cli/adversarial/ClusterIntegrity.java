package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;

import java.io.IOException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

/**
 * What an attack on one client must leave intact in a {@link ServeCluster} (started with metrics on): every memserver
 * still reachable and never declared down, and no slab degraded, rebuilding or lost.
 */
public final class ClusterIntegrity {
    private ClusterIntegrity() {}

    public static void assertIntact(ServeCluster c) throws IOException, InterruptedException {
        String metrics = Scrape.metrics(c.metricsAddress());
        String log = c.bridge().log();
        assertFalse(log.contains(" is down: "), "the bridge declared a memserver down:\n" + c.logs());
        double memservers = Scrape.sum(metrics, "rbridge_memserver_reachable");
        assertEquals(c.memservers().size(), (int) memservers, "memservers reachable, from the bridge's metrics");
        for (String state : new String[]{"degraded", "rebuilding", "lost"}) {
            assertEquals(0.0, Scrape.sum(metrics, "rbridge_volume_slabs", "state=\"" + state + "\""),
                    "slabs " + state + ", from the bridge's metrics\n" + c.logs());
        }
    }
}
