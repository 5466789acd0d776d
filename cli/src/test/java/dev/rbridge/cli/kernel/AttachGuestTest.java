package dev.rbridge.cli.kernel;

import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * {@code rbridge attach} in a qemu guest with the kernel's nbd driver (kmod-hooks/lab): it hands two connections to
 * /dev/nbd0 through netlink (no nbd-client), ext4 is made and filled by write_data, and the host restarts the bridge
 * in the middle of the run. The kernel reports the link dead, attach reconnects with RECONFIGURE, the I/O waits and
 * goes on: write_data verifies, fsck is clean, and no I/O error reaches the block layer or the filesystem. Then
 * {@code rbridge detach} disconnects and the watching attach process exits by itself.
 *
 * <p>Like {@link KernelNbdGuestTest}, it fails (does not skip) when the lab cannot run, unless
 * {@code RBRIDGE_SKIP_GUEST_TESTS=1}.
 */
@Timeout(900)
class AttachGuestTest {
    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    @BeforeAll
    static void lab() {
        Assumptions.assumeFalse("1".equals(System.getenv(KernelNbdGuestTest.OPT_OUT)),
                KernelNbdGuestTest.OPT_OUT + "=1: the qemu guest tests are off");
        if (PeerTool.run(10, List.of("sh", "-c", "command -v qemu-system-x86_64")).exitCode() != 0) {
            fail("qemu-system-x86_64 is missing, so the attach guest test cannot run. Install it with: apt-get "
                    + "install qemu-system-x86 debootstrap busybox-static cpio, or set " + KernelNbdGuestTest.OPT_OUT
                    + "=1 to skip the guest tests on a machine that cannot run them.");
        }
        KmodHooks.writeData();
        PeerTool.Result image = PeerTool.run(900, List.of(KmodHooks.dir().resolve("lab/build-image").toString()));
        if (image.exitCode() != 0) {
            fail("kmod-hooks/lab/build-image failed (set " + KernelNbdGuestTest.OPT_OUT + "=1 to skip):\n"
                    + image.output());
        }
    }

    @Test
    void attachReconnectsThroughABridgeRestartWithoutAnIoErrorAndDetaches() throws Exception {
        String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
        Path run = Files.createDirectories(Path.of("target", "kernel-guest", "attach-" + stamp).toAbsolutePath());
        Path share = Files.createDirectories(run.resolve("share"));
        Files.copy(KmodHooks.writeData(), share.resolve("write_data"), StandardCopyOption.REPLACE_EXISTING);
        String classpath = KmodHooks.copyClasspath(share);
        Path job = run.resolve("attach-guest.sh");
        try (InputStream in = AttachGuestTest.class.getResourceAsStream("/kernel/attach-guest.sh")) {
            Files.copy(in, job, StandardCopyOption.REPLACE_EXISTING);
        }

        try (ServeCluster c = LOGS.watch(ServeCluster.builder("attach").memservers(2).capacity("1G").timeout("2")
                .volume("disk,size=512M,replicas=2,slab=16M").start())) {
            Path out = run.resolve("run-guest.out");
            List<String> cmd = new ArrayList<>(List.of(KmodHooks.dir().resolve("lab/run-guest").toString(),
                    "--timeout", "540", "--mem", "1536", "--share", share.toString(),
                    "--run-dir", run.resolve("guest").toString(), "--env", "NBD_PORT=" + c.nbdPort(),
                    "--env", "RB_CP=" + classpath, job.toString()));
            Process guest = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out.toFile())
                    .redirectInput(ProcessBuilder.Redirect.from(Path.of("/dev/null").toFile())).start();
            try {
                Path restartNow = share.resolve("restart-now");
                while (!Files.exists(restartNow) && guest.isAlive()) {
                    Thread.sleep(100);
                }
                assertTrue(Files.exists(restartNow), "the guest ended before asking for the restart\n" + tail(out, 80));
                long t = System.nanoTime();
                c.restartBridge(); // SIGTERM (drain, leases given back), then the same command on the same ports
                boolean midRun = !Files.exists(share.resolve("restart-run.done"));
                System.out.printf("bridge restarted in %.1f s%n", (System.nanoTime() - t) / 1e9);

                assertTrue(guest.waitFor(720, TimeUnit.SECONDS), "run-guest did not end\n" + tail(out, 80));
                Path jobLog = run.resolve("guest/job.log");
                String output = Files.readString(Files.exists(jobLog) ? jobLog : out, StandardCharsets.UTF_8);
                assertEquals(0, guest.exitValue(), "the guest script failed (run folder " + run + ")\n"
                        + tail(out, 150) + "\n---- attach.log\n" + read(share.resolve("attach.log")));
                assertTrue(midRun, "write_data had finished before the bridge restarted");
                assertTrue(output.contains("all verified"), tail(out, 80));
                assertEquals(2, output.lines().filter(l -> l.startsWith("write_data: OK:")).count(),
                        "both write_data runs verified\n" + tail(out, 120));
                assertFalse(output.contains("MISMATCH"), tail(out, 120));
                String attachLog = read(share.resolve("attach.log"));
                assertTrue(attachLog.contains("link to") && attachLog.contains("reconnected to"), attachLog);
            } finally {
                if (guest.isAlive()) {
                    guest.destroy();
                    if (!guest.waitFor(20, TimeUnit.SECONDS)) {
                        guest.descendants().forEach(ProcessHandle::destroyForcibly);
                        guest.destroyForcibly();
                    }
                }
            }
        }
    }

    private static String read(Path p) throws IOException {
        return Files.exists(p) ? Files.readString(p, StandardCharsets.UTF_8) : "(no " + p + ")";
    }

    private static String tail(Path file, int lines) throws IOException {
        List<String> all = Files.exists(file) ? Files.readAllLines(file, StandardCharsets.UTF_8) : List.of();
        StringBuilder b = new StringBuilder("---- ").append(file).append(" (last ").append(lines).append(" lines)\n");
        for (String l : all.subList(Math.max(0, all.size() - lines), all.size())) {
            b.append(l).append('\n');
        }
        return b.toString();
    }
}
