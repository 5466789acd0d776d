package dev.rbridge.cli.kernel;

import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Assumptions;

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

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * One run of a job script in the qemu guest lab ({@code kmod-hooks/lab}), as the guest tests use it: a run folder
 * {@code target/kernel-guest/NAME-STAMP} whose {@code share/} (the guest's 9p share and working folder) holds
 * {@code write_data}, the prelude every job sources ({@value #PRELUDE}) and, when asked, this JVM's classpath; the job
 * script from {@code src/test/resources/kernel}; and {@code run-guest} started on it, stopped when the test ends.
 *
 * <p>The guest tests fail (do not skip) when the lab cannot run, unless {@code RBRIDGE_SKIP_GUEST_TESTS=1}.
 */
final class GuestLab {
    static final String OPT_OUT = "RBRIDGE_SKIP_GUEST_TESTS";
    private static boolean imageReady;

    /** What every job script sources first (say, await, rb, wd, soft_roce), a resource beside them. */
    static final String PRELUDE = "guest-prelude.sh";

    /** The run folder: run-guest's output, the guest's own folder ({@code guest/}) and the share. */
    final Path run;
    /** The guest's working folder, shared over 9p: files here are how host and guest signal each other. */
    final Path share;
    private final Path job;
    private final Path out;
    private boolean numa;
    private String wire;
    private int smp;

    private GuestLab(Path run, Path share, Path job) {
        this.run = run;
        this.share = share;
        this.job = job;
        this.out = run.resolve("run-guest.out");
    }

    /**
     * For a guest test's {@code @BeforeAll}: skips with {@code RBRIDGE_SKIP_GUEST_TESTS=1}; otherwise builds
     * write_data and the guest image (once per JVM) or fails saying what is missing.
     *
     * @param test what the test is called in a failure ("the attach guest test")
     */
    static synchronized void require(String test) {
        Assumptions.assumeFalse("1".equals(System.getenv(OPT_OUT)), OPT_OUT + "=1: the qemu guest tests are off");
        if (imageReady) {
            return;
        }
        if (PeerTool.run(10, List.of("sh", "-c", "command -v qemu-system-x86_64")).exitCode() != 0) {
            fail("qemu-system-x86_64 is missing, so " + test + " cannot run. Install it with: apt-get install"
                    + " qemu-system-x86 debootstrap busybox-static cpio (./test does this as root), or set " + OPT_OUT
                    + "=1 to skip the guest tests on a machine that cannot run them.");
        }
        KmodHooks.writeData();
        long t0 = System.nanoTime();
        PeerTool.Result image = PeerTool.run(900, List.of(KmodHooks.dir().resolve("lab/build-image").toString()));
        if (image.exitCode() != 0) {
            fail("kmod-hooks/lab/build-image failed, so " + test + " cannot run (set " + OPT_OUT
                    + "=1 to skip the guest tests on a machine that cannot build the image):\n" + image.output());
        }
        System.out.printf("guest image ready in %.1f s: %s", (System.nanoTime() - t0) / 1e9, image.output());
        imageReady = true;
    }

    /** A new run folder for {@code script} (a resource in {@code /kernel/}), with write_data in the share. */
    static GuestLab prepare(String name, String script) throws IOException {
        String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
        Path run = Files.createDirectories(Path.of("target", "kernel-guest", name + "-" + stamp).toAbsolutePath());
        Path share = Files.createDirectories(run.resolve("share"));
        Files.copy(KmodHooks.writeData(), share.resolve("write_data"), StandardCopyOption.REPLACE_EXISTING);
        Path job = run.resolve(script);
        copyResource(script, job);
        copyResource(PRELUDE, share.resolve(PRELUDE)); // the job sources it from its working folder
        return new GuestLab(run, share, job);
    }

    private static void copyResource(String name, Path to) throws IOException {
        try (InputStream in = GuestLab.class.getResourceAsStream("/kernel/" + name)) {
            if (in == null) {
                throw new IOException("no test resource /kernel/" + name);
            }
            Files.copy(in, to, StandardCopyOption.REPLACE_EXISTING);
        }
    }

    /** Copies this JVM's classpath into the share; returns the guest's {@code -cp} for it ({@link KmodHooks}). */
    String copyClasspath() throws IOException {
        return KmodHooks.copyClasspath(share);
    }

    /** Boots the guest with two NUMA nodes and its NIC on node 1 ({@code run-guest --numa}). */
    GuestLab numa() {
        numa = true;
        return this;
    }

    /**
     * Gives the guest a second NIC, eth1, cabled to another guest's ({@code run-guest --wire}): this guest's frames
     * leave from the host's UDP port {@code local} to {@code peer}, where the other guest (wired with the two ports
     * swapped and another {@code mac}) listens.
     */
    GuestLab wire(int local, int peer, int mac) {
        wire = local + ":" + peer + ":" + mac;
        return this;
    }

    /** The guest's CPUs (run-guest's default otherwise: the host's, at most 4). */
    GuestLab smp(int cpus) {
        smp = cpus;
        return this;
    }

    /**
     * Boots the guest with the job script: {@code run-guest --timeout SECONDS --mem MIB} and each of {@code env}
     * ({@code NAME=VALUE}) in the job's environment. run-guest's output goes to {@code run-guest.out}.
     */
    Guest start(int timeoutSeconds, int memoryMiB, String... env) throws IOException {
        List<String> cmd = new ArrayList<>(List.of(KmodHooks.dir().resolve("lab/run-guest").toString(),
                "--timeout", String.valueOf(timeoutSeconds), "--mem", String.valueOf(memoryMiB),
                "--share", share.toString(), "--run-dir", run.resolve("guest").toString()));
        if (numa) {
            cmd.add("--numa");
        }
        if (wire != null) {
            cmd.addAll(List.of("--wire", wire));
        }
        if (smp > 0) {
            cmd.addAll(List.of("--smp", String.valueOf(smp)));
        }
        for (String e : env) {
            cmd.addAll(List.of("--env", e));
        }
        cmd.add(job.toString());
        return new Guest(new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out.toFile())
                .redirectInput(ProcessBuilder.Redirect.from(Path.of("/dev/null").toFile())).start());
    }

    /** A file of the share, or a line saying it is not there. */
    String shared(String name) throws IOException {
        Path p = share.resolve(name);
        return Files.exists(p) ? Files.readString(p, StandardCharsets.UTF_8) : "(no " + p + ")";
    }

    /** The last {@code lines} lines of run-guest's output (kernel messages included), under a heading. */
    String tail(int lines) throws IOException {
        List<String> all = Files.exists(out) ? Files.readAllLines(out, StandardCharsets.UTF_8) : List.of();
        StringBuilder b = new StringBuilder("---- ").append(out).append(" (last ").append(lines).append(" lines)\n");
        for (String l : all.subList(Math.max(0, all.size() - lines), all.size())) {
            b.append(l).append('\n');
        }
        return b.toString();
    }

    /** A running guest; closing it stops run-guest (which stops qemu on SIGTERM), then kills what is left. */
    final class Guest implements AutoCloseable {
        private final Process process;

        private Guest(Process process) {
            this.process = process;
        }

        /** Waits until the job creates {@code name} in the share; fails if the guest ends first. */
        void awaitSignal(String name) throws IOException, InterruptedException {
            Path signal = share.resolve(name);
            while (!Files.exists(signal) && process.isAlive()) {
                Thread.sleep(100);
            }
            assertTrue(Files.exists(signal), "the guest ended before creating " + name + "\n" + tail(80));
        }

        /**
         * Waits for run-guest to end and returns what the job printed: its own log ({@code guest/job.log}, without
         * kernel messages) when there is one, else run-guest's output.
         */
        String finish(long timeoutSeconds) throws IOException, InterruptedException {
            assertTrue(process.waitFor(timeoutSeconds, TimeUnit.SECONDS), "run-guest did not end\n" + tail(80));
            Path jobLog = run.resolve("guest/job.log");
            return Files.readString(Files.exists(jobLog) ? jobLog : out, StandardCharsets.UTF_8);
        }

        int exitValue() {
            return process.exitValue();
        }

        @Override
        public void close() throws InterruptedException {
            if (process.isAlive()) {
                process.destroy();
                if (!process.waitFor(20, TimeUnit.SECONDS)) {
                    process.descendants().forEach(ProcessHandle::destroyForcibly);
                    process.destroyForcibly();
                }
            }
        }
    }
}
