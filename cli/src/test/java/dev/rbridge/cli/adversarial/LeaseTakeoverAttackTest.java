package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The bridge stops renewing for longer than its lease (here it is frozen with SIGSTOP, as a long pause or a cut
 * network would), and a client with the token takes the volume's lease over on one memserver: legitimately, the lease
 * had lapsed. When the bridge comes back its renewal there is refused. It took that memserver down and wrote on to
 * the replicas on the other one, so two clients owned one volume; now it fences the volume: every request on it
 * fails with EIO, it says so once in its log, admin and metrics show it, and it gives its other leases back. Its
 * other volume is served as before.
 *
 * <p>Unlike the other attacks, this one needs a fault (the frozen bridge): nothing is served while the bridge is
 * frozen, so the well-behaved client runs before and after the freeze, not through it.
 */
@Timeout(300)
class LeaseTakeoverAttackTest extends MemserverAttackTest {
    static final String OTHER = "other";

    static PeerTool.Result nbdsh(ServeCluster c, String volume, String code) {
        return PeerTool.run(60, List.of("nbdsh", "-u", c.uri(volume), "-c", code));
    }

    @Test
    void aBridgeThatLostItsLeaseFailsTheVolumeWithEioInsteadOfWritingOn() throws Exception {
        PeerTool.require("nbdsh", "libnbd-bin");
        try (ServeCluster c = start(cluster("takeover").volume(OTHER + ",size=64M,replicas=2,slab=16M")
                .bridgeArgs("--lease", "2"))) {
            assertEquals(0, nbdsh(c, VOLUME, "h.pwrite(b'\\x42' * 65536, 0)").exitCode());
            try (WellBehavedClient before = wellBehaved(c, OTHER)) {
                before.awaitCycles(10, Duration.ofSeconds(30));
                before.assertServedWithin(SERVED_WITHIN);
            }

            ServeCluster.Memserver taken = c.memserver(0);
            ServeCluster.Memserver other = c.memserver(1);
            Raw attacker = Raw.connect(address(taken), loopback(17));
            assertEquals(0, attacker.hello(TOKEN, "attacker").status());
            c.bridge().freeze();
            try {
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(4);
                Reply lease;
                do {
                    lease = attacker.lease(VOLUME, "attacker", 60_000);
                    if (lease.status() != 0) {
                        Thread.sleep(50);
                    }
                } while (lease.status() != 0 && System.nanoTime() < deadline);
                assertEquals(0, lease.status(), "the frozen bridge's lease did not lapse: " + lease.message());
                assertEquals(1, lease.body().get(8), "a takeover");
                assertEquals(1, lease.body().order(java.nio.ByteOrder.LITTLE_ENDIAN).getLong(9),
                        "one change of owner: from the bridge to the attacker");
            } finally {
                c.bridge().thaw();
            }
            // The attacker keeps its connection, and so its lease, as a new owner would.

            // The bridge must now refuse the volume rather than write on to the replica it still reaches.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
            PeerTool.Result write;
            while (true) {
                write = nbdsh(c, VOLUME, "h.pwrite(b'\\x43' * 4096, 1048576)");
                if (write.exitCode() != 0 || System.nanoTime() > deadline) {
                    break;
                }
                Thread.sleep(200);
            }
            if (write.exitCode() == 0) {
                fail("15 s after it lost the lease of volume " + VOLUME + " on " + taken.address()
                        + ", the bridge still acknowledges writes to it\n" + c.logs());
            }
            assertTrue(write.output().contains("Input/output error") || write.output().contains("EIO"),
                    write.output());
            PeerTool.Result read = nbdsh(c, VOLUME, "h.pread(4096, 0)");
            assertNotEquals(0, read.exitCode(), "reads of the fenced volume must fail too: " + read.output());

            assertEquals("fenced", c.volume(VOLUME).get("state"), String.valueOf(c.volume(VOLUME)));
            String metrics = Scrape.metrics(c.metricsAddress());
            assertEquals(1.0, Scrape.sum(metrics, "rbridge_volume_fenced", "export=\"" + VOLUME + "\""));
            assertEquals(0.0, Scrape.sum(metrics, "rbridge_volume_fenced", "export=\"" + OTHER + "\""));
            long told = c.bridge().log().lines().filter(l -> l.contains("stops serving it")).count();
            assertEquals(1, told, "the bridge should say once that it fenced the volume:\n" + c.bridge().log());

            // It gave its lease on the other memserver back: whoever owns the volume now can take it there too.
            try (Raw heir = Raw.connect(address(other), loopback(18))) {
                assertEquals(0, heir.hello(TOKEN, "heir").status());
                Reply there = null;
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (System.nanoTime() < until && (there = heir.lease(VOLUME, "heir", 60_000)).status() != 0) {
                    Thread.sleep(100);
                }
                assertEquals(0, there.status(), "the fenced bridge kept its lease on " + other.address() + ": "
                        + there.message());
            }

            attacker.close();

            // Its other volume, and everything else, serves as before.
            try (WellBehavedClient after = wellBehaved(c, OTHER)) {
                assertServesAsBefore(c, after);
            }
        }
    }
}
