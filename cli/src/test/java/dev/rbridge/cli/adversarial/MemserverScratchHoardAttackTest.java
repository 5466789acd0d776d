package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A client with the token takes every free byte of every memserver as scratch regions (as ping and bench do, without
 * a volume lease) and goes away without giving them back. The memory stayed granted until an operator revoked it,
 * and the bridge had nowhere to put a new slab: writes to fresh parts of the volume failed with ENOSPC. Now a
 * client's scratch regions are released when its connection ends (a leased volume's regions stay: they are data).
 */
@Timeout(300)
class MemserverScratchHoardAttackTest extends MemserverAttackTest {
    @Test
    void scratchMemoryLeftBehindByAClientThatWentAwayIsGivenBack() throws Exception {
        PeerTool.require("nbdsh", "libnbd-bin");
        try (ServeCluster c = start(cluster("scratch-hoard")); WellBehavedClient w = wellBehaved(c, VOLUME)) {
            double[] grantedBefore = new double[c.memservers().size()];
            for (ServeCluster.Memserver m : c.memservers()) {
                grantedBefore[m.index()] = Scrape.sum(Scrape.metrics(m.metricsAddress()),
                        "rbridge_memserver_granted_bytes");
                Raw r = Raw.connect(address(m), loopback(9));
                assertEquals(0, r.hello(TOKEN, "hoarder").status());
                int taken = 0;
                while (true) {
                    Reply a = r.call(ALLOCATE, r.body(8 + 2 + 5 + 20).putLong(16L << 20).putShort((short) 5)
                            .put("hoard".getBytes(StandardCharsets.US_ASCII)).putLong(taken).putInt(0).putLong(0));
                    if (a.status() != 0) {
                        assertEquals(STATUS_NO_CAPACITY, a.status(), a.message());
                        break;
                    }
                    taken++;
                }
                assertTrue(taken > 10, "the hoarder took only " + taken + " regions of 16 MiB");
                r.close(); // gone, without a RELEASE
            }
            w.assertServedWithin(SERVED_WITHIN); // its slab was placed before: it never needed new memory

            // The hoard is given back as soon as the memserver sees its connection end.
            for (ServeCluster.Memserver m : c.memservers()) {
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                double granted;
                while ((granted = Scrape.sum(Scrape.metrics(m.metricsAddress()), "rbridge_memserver_granted_bytes"))
                        != grantedBefore[m.index()] && System.nanoTime() < deadline) {
                    Thread.sleep(50);
                }
                assertEquals(grantedBefore[m.index()], granted, "memserver " + m.address() + " still grants the "
                        + "scratch regions of a client that left");
            }
            // Once the bridge has heard of the room (it asks every second), a part of the volume never written gets
            // a new slab on both memservers.
            for (ServeCluster.Memserver m : c.memservers()) {
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (Scrape.sum(Scrape.metrics(c.metricsAddress()), "rbridge_memserver_free_reported_bytes",
                        "memserver=\"" + m.address() + "\"") < 64L << 20 && System.nanoTime() < deadline) {
                    Thread.sleep(100);
                }
            }
            PeerTool.Result write = PeerTool.run(60, List.of("nbdsh", "-u", c.uri(VOLUME), "-c",
                    "h.pwrite(b'\\x17' * 65536, 200 * 1024 * 1024)\nassert h.pread(65536, 200 * 1024 * 1024) "
                            + "== b'\\x17' * 65536"));
            assertEquals(0, write.exitCode(), "a write to a new slab after the hoarder left: " + write.output());
            for (ServeCluster.Memserver m : c.memservers()) {
                // The memserver's gauges are read at most every 200 ms: a scrape right after the one above may
                // still show the stats from before the write.
                double expected = grantedBefore[m.index()] + (16 << 20);
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                double granted;
                while ((granted = Scrape.sum(Scrape.metrics(m.metricsAddress()), "rbridge_memserver_granted_bytes"))
                        != expected && System.nanoTime() < deadline) {
                    Thread.sleep(50);
                }
                assertEquals(expected, granted, "memserver " + m.address()
                        + ": the volume's new slab is granted beside what was there before the hoard");
            }
            assertServesAsBefore(c, w);
        }
    }
}
