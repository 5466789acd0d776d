package dev.rbridge.cli.kernel;

import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Real RDMA verbs, not emulation: in a qemu guest (kmod-hooks/lab) soft-RoCE ({@code rdma_rxe} on eth0) is the RDMA
 * device, and two memservers and a bridge run on {@code --transport ucx} restricted to verbs lanes
 * ({@code UCX_TLS=rc_verbs,ud_verbs}). {@code rbridge ping} validates, {@code rbridge bench} reports an
 * {@code rc_verbs/rxe0} lane and nothing else, the memserver's UCX progress thread uses no CPU while a client writes
 * one-sided for seconds, and the kernel's nbd-client on /dev/nbd0 against that bridge passes write_data and an fio
 * {@code verify=crc32c} run.
 *
 * <p>Like the other guest tests it fails (does not skip) when the lab cannot run, unless
 * {@code RBRIDGE_SKIP_GUEST_TESTS=1}.
 */
@Timeout(900)
class RxeGuestTest {
    private static final Pattern PASSIVE = Pattern.compile("passive: memserver progress thread (-?\\d+) ticks, whole"
            + " memserver (\\d+) ticks");

    @BeforeAll
    static void lab() {
        Assumptions.assumeFalse("1".equals(System.getenv(KernelNbdGuestTest.OPT_OUT)),
                KernelNbdGuestTest.OPT_OUT + "=1: the qemu guest tests are off");
        if (PeerTool.run(10, List.of("sh", "-c", "command -v qemu-system-x86_64")).exitCode() != 0) {
            fail("qemu-system-x86_64 is missing, so the soft-RoCE guest test cannot run. Install it with: apt-get "
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
    void ucxOverSoftRoceUsesVerbsLanesLeavesTheMemserverPassiveAndCarriesKernelNbd() throws Exception {
        String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
        Path run = Files.createDirectories(Path.of("target", "kernel-guest", "rxe-" + stamp).toAbsolutePath());
        Path share = Files.createDirectories(run.resolve("share"));
        Files.copy(KmodHooks.writeData(), share.resolve("write_data"), StandardCopyOption.REPLACE_EXISTING);
        String classpath = KmodHooks.copyClasspath(share);
        Path job = run.resolve("rxe-guest.sh");
        try (InputStream in = RxeGuestTest.class.getResourceAsStream("/kernel/rxe-guest.sh")) {
            Files.copy(in, job, StandardCopyOption.REPLACE_EXISTING);
        }
        Path out = run.resolve("run-guest.out");
        List<String> cmd = List.of(KmodHooks.dir().resolve("lab/run-guest").toString(), "--timeout", "600",
                "--mem", "3072", "--share", share.toString(), "--run-dir", run.resolve("guest").toString(),
                "--env", "RB_CP=" + classpath, job.toString());
        Process guest = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out.toFile())
                .redirectInput(ProcessBuilder.Redirect.from(Path.of("/dev/null").toFile())).start();
        try {
            assertTrue(guest.waitFor(720, TimeUnit.SECONDS), "run-guest did not end\n" + tail(out, 80));
            Path jobLog = run.resolve("guest/job.log");
            String output = Files.readString(Files.exists(jobLog) ? jobLog : out, StandardCharsets.UTF_8);
            assertEquals(0, guest.exitValue(), "the guest script failed (run folder " + run + ")\n" + tail(out, 150)
                    + "\n---- ms1.log\n" + read(share.resolve("ms1.log")) + "\n---- serve.log\n"
                    + read(share.resolve("serve.log")));
            assertTrue(output.contains("all verified"), tail(out, 80));
            assertTrue(output.contains("all validated"), "ping validated over rxe\n" + tail(out, 80));
            String lanes = output.lines().filter(l -> l.contains("UCX lanes")).findFirst().orElse("");
            assertTrue(lanes.contains("rc_verbs/rxe0"), "an RDMA lane: " + lanes);
            assertFalse(lanes.matches(".*(tcp/|posix|sysv|cma).*"), "no emulated lane: " + lanes);
            Matcher p = PASSIVE.matcher(output);
            assertTrue(p.find(), "the passivity measurement\n" + tail(out, 80));
            long progress = Long.parseLong(p.group(1));
            // One-sided: the memserver's progress thread is not woken by GET/PUT. 5 ticks (50 ms) over an 8 s run
            // leaves room for the connect and the region mapping, which are two-sided.
            assertTrue(progress <= 5, "memserver progress thread used " + progress + " ticks during one-sided writes");
            assertEquals(1, output.lines().filter(l -> l.startsWith("write_data: OK:")).count(),
                    "write_data verified through kernel nbd over the ucx bridge\n" + tail(out, 80));
            assertTrue(output.contains("fio: errors 0, written KiB 32768"), "fio verify through the bridge\n"
                    + tail(out, 60));
            System.out.println("rxe guest run: " + lanes.strip() + "; " + p.group());
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
