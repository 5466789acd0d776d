package dev.rbridge.cli.kernel;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import dev.rbridge.cli.CliProcess;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code rbridge attach} in a qemu guest with the kernel's nbd driver (kmod-hooks/lab): it hands two connections to
 * /dev/nbd0 through netlink (no nbd-client), ext4 is made and filled by write_data, and the host restarts the bridge
 * in the middle of the run. The kernel reports the link dead, attach reconnects with RECONFIGURE, the I/O waits and
 * goes on: write_data verifies, fsck is clean, and no I/O error reaches the block layer or the filesystem. Then
 * the host grows the volume while it serves ({@code rbridge admin grow}) and the watching attach resizes the device
 * through netlink (RECONFIGURE with a size), and data written past the old end reads back. Then
 * {@code rbridge detach} disconnects and the watching attach process exits by itself.
 *
 * <p>Like the other guest tests it fails (does not skip) when the lab cannot run, unless
 * {@code RBRIDGE_SKIP_GUEST_TESTS=1} ({@link GuestLab}).
 */
@Timeout(900)
@Tag("guest")
class AttachGuestTest {
    private static final String TOKEN = "attach-guest-token-0123456789abcdef";

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    @BeforeAll
    static void lab() {
        GuestLab.require("the attach guest test");
    }

    @Test
    void attachReconnectsThroughABridgeRestartWithoutAnIoErrorAndDetaches() throws Exception {
        GuestLab lab = GuestLab.prepare("attach", "attach-guest.sh");
        String classpath = lab.copyClasspath();
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("attach").memservers(2).capacity("1G").timeout("2")
                .token(TOKEN).volume("disk,size=512M,replicas=2,slab=16M").start());
                GuestLab.Guest guest = lab.start(540, 1536, "NBD_PORT=" + c.nbdPort(), "RB_CP=" + classpath)) {
            guest.awaitSignal("restart-now");
            long t = System.nanoTime();
            c.restartBridge(); // SIGTERM (drain, leases given back), then the same command on the same ports
            boolean midRun = !Files.exists(lab.share.resolve("restart-run.done"));
            System.out.printf("bridge restarted in %.1f s%n", (System.nanoTime() - t) / 1e9);
            guest.awaitSignal("grow-now");
            Path token = Files.writeString(Files.createTempFile("attach", ".token"), TOKEN + "\n");
            Path adminLog = Files.createTempFile("attach-grow", ".log");
            Process grow = CliProcess.start(adminLog, "admin", "--bridge", c.adminAddress(), "--token-file",
                    token.toString(), "grow", "disk", "768M");
            String grown = new String(grow.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(grow.waitFor(60, TimeUnit.SECONDS));
            assertEquals(0, grow.exitValue(), grown + Files.readString(adminLog));

            String output = guest.finish(720);
            assertEquals(0, guest.exitValue(), "the guest script failed (run folder " + lab.run + ")\n"
                    + lab.tail(150) + "\n---- attach.log\n" + lab.shared("attach.log"));
            assertTrue(midRun, "write_data had finished before the bridge restarted");
            assertTrue(output.contains("all verified"), lab.tail(80));
            assertEquals(2, output.lines().filter(l -> l.startsWith("write_data: OK:")).count(),
                    "both write_data runs verified\n" + lab.tail(120));
            assertFalse(output.contains("MISMATCH"), lab.tail(120));
            String attachLog = lab.shared("attach.log");
            assertTrue(attachLog.contains("link to") && attachLog.contains("reconnected to"), attachLog);
            assertTrue(attachLog.contains("grown from 536870912 to 805306368 bytes"), attachLog);
        }
    }
}
