package dev.rbridge.cli.kernel;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.nio.file.Files;
import java.time.Duration;
import java.util.List;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The Linux kernel's own NBD client against {@code rbridge serve}: a qemu guest (kmod-hooks/lab) attaches two exports
 * of a bridge that runs on the host with its volumes on two memserver processes (R=2), makes ext4, runs write_data
 * over a file and over the raw device, checks everything across umount/fsck/remount and a reconnect, and keeps
 * verifying while the host SIGKILLs a memserver in the middle of a write_data run (the guest signals the moment
 * through a file on the 9p share).
 *
 * <p>This test does not skip when the lab cannot run: it fails with what is missing. A developer without qemu (or
 * root for the one-time image build) sets {@code RBRIDGE_SKIP_GUEST_TESTS=1} to skip it ({@link GuestLab}).
 */
@Timeout(900)
@Tag("guest")
class KernelNbdGuestTest {
    private static final Pattern PASS = Pattern.compile("write_data: (\\w+) +(\\w+) +pass \\d+: .*");

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    @BeforeAll
    static void lab() {
        GuestLab.require("the kernel nbd guest test");
    }

    @Test
    void kernelNbdClientExt4AndRawDeviceSurviveRemountReconnectAndAMemserverKill() throws Exception {
        GuestLab lab = GuestLab.prepare("nbd", "nbd-guest.sh");
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("kernel-nbd").memservers(2).capacity("1G").timeout("2")
                .volume("disk,size=512M,replicas=2,slab=16M").volume("raw,size=256M,replicas=2,slab=8M").start())) {
            long t0 = System.nanoTime();
            try (GuestLab.Guest guest = lab.start(480, 1024, "NBD_PORT=" + c.nbdPort())) {
                // The guest creates kill-now once a fifth of the raw writes of its third write_data run are done.
                guest.awaitSignal("kill-now");
                c.memserver(0).kill9();
                boolean midRun = !Files.exists(lab.share.resolve("kill-run.done"));
                System.out.printf("memserver 0 killed %.1f s after the guest started%n",
                        (System.nanoTime() - t0) / 1e9);

                String output = guest.finish(600);
                assertEquals(0, guest.exitValue(), "the guest script failed (run folder " + lab.run + ")\n"
                        + lab.tail(120));
                assertTrue(midRun, "write_data had finished before the memserver was killed");
                assertTrue(output.contains("guest: ") && output.contains("all verified"), lab.tail(80));
                long oks = output.lines().filter(l -> l.startsWith("write_data: OK:")).count();
                assertEquals(7, oks, "every write_data run verified\n" + lab.tail(120));
                assertFalse(output.contains("MISMATCH"), lab.tail(120));
                System.out.printf("guest run took %.1f s; write_data in the guest:%n", (System.nanoTime() - t0) / 1e9);
                output.lines().filter(l -> PASS.matcher(l).matches()).forEach(l -> System.out.println("  " + l));
            }

            // The bridge took the dead memserver out; both volumes kept every slab on the survivor.
            assertTrue(c.bridge().log().contains("failed"), "the bridge logged the failover");
            for (String volume : List.of("disk", "raw")) {
                c.awaitAdmin("/volumes", v -> "degraded".equals(String.valueOf(c.volume(volume).get("state"))),
                        Duration.ofSeconds(30));
                assertEquals(0L, ((Number) c.volume(volume).get("lost")).longValue(), volume + " lost slabs");
            }
        }
    }
}
