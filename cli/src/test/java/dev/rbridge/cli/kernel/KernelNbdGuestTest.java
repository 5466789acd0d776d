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
import java.time.Duration;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The Linux kernel's own NBD client against {@code rbridge serve}: a qemu guest (kmod-hooks/lab) attaches two exports
 * of a bridge that runs on the host with its volumes on two memserver processes (R=2), makes ext4, runs write_data
 * over a file and over the raw device, checks everything across umount/fsck/remount and a reconnect, and keeps
 * verifying while the host SIGKILLs a memserver in the middle of a write_data run (the guest signals the moment
 * through a file on the 9p share).
 *
 * <p>This test does not skip when the lab cannot run: it fails with what is missing. A developer without qemu (or
 * root for the one-time image build) sets {@code RBRIDGE_SKIP_GUEST_TESTS=1} to skip it.
 */
@Timeout(900)
class KernelNbdGuestTest {
    static final String OPT_OUT = "RBRIDGE_SKIP_GUEST_TESTS";
    private static final Pattern PASS = Pattern.compile("write_data: (\\w+) +(\\w+) +pass \\d+: .*");

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    @BeforeAll
    static void lab() {
        Assumptions.assumeFalse("1".equals(System.getenv(OPT_OUT)), OPT_OUT + "=1: the qemu guest tests are off");
        if (PeerTool.run(10, List.of("sh", "-c", "command -v qemu-system-x86_64")).exitCode() != 0) {
            fail("qemu-system-x86_64 is missing, so the kernel nbd guest test cannot run. Install it with: apt-get "
                    + "install qemu-system-x86 debootstrap busybox-static cpio (./test does this as root), or set "
                    + OPT_OUT + "=1 to skip the guest tests on a machine that cannot run them.");
        }
        KmodHooks.writeData();
        long t0 = System.nanoTime();
        PeerTool.Result image = PeerTool.run(900, List.of(KmodHooks.dir().resolve("lab/build-image").toString()));
        if (image.exitCode() != 0) {
            fail("kmod-hooks/lab/build-image failed, so the kernel nbd guest test cannot run (set " + OPT_OUT
                    + "=1 to skip the guest tests on a machine that cannot build the image):\n" + image.output());
        }
        System.out.printf("guest image ready in %.1f s: %s", (System.nanoTime() - t0) / 1e9, image.output());
    }

    @Test
    void kernelNbdClientExt4AndRawDeviceSurviveRemountReconnectAndAMemserverKill() throws Exception {
        String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
        Path run = Files.createDirectories(Path.of("target", "kernel-guest", "nbd-" + stamp).toAbsolutePath());
        Path share = Files.createDirectories(run.resolve("share"));
        Files.copy(KmodHooks.writeData(), share.resolve("write_data"), StandardCopyOption.REPLACE_EXISTING);
        Path job = run.resolve("nbd-guest.sh");
        try (InputStream in = KernelNbdGuestTest.class.getResourceAsStream("/kernel/nbd-guest.sh")) {
            Files.copy(in, job, StandardCopyOption.REPLACE_EXISTING);
        }

        try (ServeCluster c = LOGS.watch(ServeCluster.builder("kernel-nbd").memservers(2).capacity("1G").timeout("2")
                .volume("disk,size=512M,replicas=2,slab=16M").volume("raw,size=256M,replicas=2,slab=8M").start())) {
            Path out = run.resolve("run-guest.out");
            List<String> cmd = new ArrayList<>(List.of(KmodHooks.dir().resolve("lab/run-guest").toString(),
                    "--timeout", "480", "--mem", "1024", "--share", share.toString(),
                    "--run-dir", run.resolve("guest").toString(),
                    "--env", "NBD_PORT=" + c.nbdPort(), job.toString()));
            long t0 = System.nanoTime();
            Process guest = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out.toFile())
                    .redirectInput(ProcessBuilder.Redirect.from(Path.of("/dev/null").toFile())).start();
            try {
                // The guest creates kill-now once a fifth of the raw writes of its third write_data run are done.
                Path killNow = share.resolve("kill-now");
                while (!Files.exists(killNow) && guest.isAlive()) {
                    Thread.sleep(100);
                }
                assertTrue(Files.exists(killNow), "the guest ended before asking for the kill\n" + tail(out, 80));
                c.memserver(0).kill9();
                boolean midRun = !Files.exists(share.resolve("kill-run.done"));
                System.out.printf("memserver 0 killed %.1f s after the guest started%n", (System.nanoTime() - t0) / 1e9);

                assertTrue(guest.waitFor(600, TimeUnit.SECONDS), "run-guest did not end\n" + tail(out, 80));
                Path jobLog = run.resolve("guest/job.log"); // the script's output without kernel messages
                String output = Files.readString(Files.exists(jobLog) ? jobLog : out, StandardCharsets.UTF_8);
                assertEquals(0, guest.exitValue(), "the guest script failed (run folder " + run + ")\n"
                        + tail(out, 120));
                assertTrue(midRun, "write_data had finished before the memserver was killed");
                assertTrue(output.contains("guest: ") && output.contains("all verified"), tail(out, 80));
                long oks = output.lines().filter(l -> l.startsWith("write_data: OK:")).count();
                assertEquals(7, oks, "every write_data run verified\n" + tail(out, 120));
                assertFalse(output.contains("MISMATCH"), tail(out, 120));
                System.out.printf("guest run took %.1f s; write_data in the guest:%n", (System.nanoTime() - t0) / 1e9);
                output.lines().filter(l -> PASS.matcher(l).matches()).forEach(l -> System.out.println("  " + l));
            } finally {
                if (guest.isAlive()) {
                    guest.destroy(); // run-guest stops qemu on SIGTERM
                    if (!guest.waitFor(20, TimeUnit.SECONDS)) {
                        guest.descendants().forEach(ProcessHandle::destroyForcibly);
                        guest.destroyForcibly();
                    }
                }
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

    private static String tail(Path file, int lines) throws IOException {
        List<String> all = Files.exists(file) ? Files.readAllLines(file, StandardCharsets.UTF_8) : List.of();
        StringBuilder b = new StringBuilder("---- ").append(file).append(" (last ").append(lines).append(" lines)\n");
        for (String l : all.subList(Math.max(0, all.size() - lines), all.size())) {
            b.append(l).append('\n');
        }
        return b.toString();
    }
}
