package dev.rbridge.cli;

import dev.rbridge.memory.SwapSafety;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code --mlock-all} locks a serving process's memory, and {@code --io-flusher} puts the threads that serve I/O in
 * the kernel's flusher state, or (on) refuses to start where the kernel refuses it, naming the capability. The swap
 * they exist for is proven in the guest lab ({@code SwapGuestTest}); here the process is checked from /proc.
 */
@Timeout(120)
class SwapSafetyOptionsTest {

    private static long statusKb(long pid, String field) throws Exception {
        for (String line : Files.readAllLines(Path.of("/proc/" + pid + "/status"))) {
            if (line.startsWith(field + ":")) {
                return Long.parseLong(line.substring(field.length() + 1).trim().split("\\s+")[0]);
            }
        }
        throw new AssertionError("no " + field + " in /proc/" + pid + "/status");
    }

    /** Starts demo, waits for its first line (it serves), hands the process to the check, stops it. */
    private static String withDemo(ProcessCheck check, String... extra) throws Exception {
        return withDemo(List.of(), check, extra);
    }

    /** As {@link #withDemo(ProcessCheck, String...)}, the JVM started through {@code prefix} (a command and its args). */
    private static String withDemo(List<String> prefix, ProcessCheck check, String... extra) throws Exception {
        Path err = Files.createTempFile("swap-safety", ".err");
        List<String> args = new ArrayList<>(List.of("demo", "--listen", "127.0.0.1:0", "--size", "16M",
                "--metrics", "none"));
        args.addAll(List.of(extra));
        Process p = CliProcess.start(err, prefix, args.toArray(String[]::new));
        try {
            String first = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))
                    .readLine();
            assertTrue(first != null && first.contains("serving"), first + "\n" + Files.readString(err));
            check.run(p.pid());
            p.destroy();
            assertTrue(p.waitFor(30, TimeUnit.SECONDS));
            return Files.readString(err);
        } finally {
            p.destroyForcibly();
        }
    }

    private interface ProcessCheck {
        void run(long pid) throws Exception;
    }

    @Test
    void mlockAllLocksTheServingProcessAndWithoutItNothingIsLocked() throws Exception {
        String log = withDemo(pid -> {
            long locked = statusKb(pid, "VmLck");
            long resident = statusKb(pid, "VmRSS");
            // Everything mapped is locked, resident or not (reserved heap included), so at least what is resident.
            assertTrue(locked >= resident, "VmLck " + locked + " kB, VmRSS " + resident + " kB");
        }, "--mlock-all", "--io-flusher", "off");
        assertTrue(log.contains("all memory locked (mlockall)"), log);

        withDemo(pid -> assertEquals(0, statusKb(pid, "VmLck")), "--io-flusher", "off");
    }

    /**
     * The command that runs the demo without CAP_SYS_RESOURCE: nothing to change where this process lacks it
     * already; as root, {@code setpriv} takes it out of the bounding set, so the JVM it starts never holds it.
     */
    private static List<String> withoutSysResource() throws java.io.IOException {
        if (!SwapSafety.hasEffectiveCapability(SwapSafety.CAP_SYS_RESOURCE)) {
            return List.of();
        }
        return List.of("setpriv", "--bounding-set=-sys_resource", "--inh-caps=-sys_resource", "--");
    }

    @Test
    void ioFlusherOnWithoutTheCapabilityIsRefusedNamingItAndAutoStartsAnyway() throws Exception {
        List<String> prefix = withoutSysResource();
        Path err = Files.createTempFile("swap-safety", ".err");
        Process p = CliProcess.start(err, prefix, "demo", "--listen", "127.0.0.1:0", "--size", "16M", "--metrics",
                "none", "--io-flusher", "on");
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "demo started although --io-flusher on was refused");
        String log = Files.readString(err);
        assertEquals(1, p.exitValue(), log);
        assertTrue(log.contains("PR_SET_IO_FLUSHER") && log.contains("CAP_SYS_RESOURCE"), log);
        // auto starts anyway and says why the state is not set
        String auto = withDemo(prefix, pid -> {
        }, "--io-flusher", "auto");
        assertTrue(auto.contains("not in the I/O flusher state"), auto);
    }

    @Test
    void ioFlusherOnWithTheCapabilityFlagsTheServingThreads() throws Exception {
        Assumptions.assumeTrue(SwapSafety.hasEffectiveCapability(SwapSafety.CAP_SYS_RESOURCE),
                "this process has no CAP_SYS_RESOURCE to hand the demo (a container may withhold it even from root)");
        String log = withDemo(List.of(), pid -> {
            List<String> ours = new ArrayList<>();
            List<String> unflagged = new ArrayList<>();
            try (var tasks = Files.list(Path.of("/proc/" + pid + "/task"))) {
                for (Path task : tasks.toList()) {
                    String name = Files.readString(task.resolve("comm")).trim();
                    if (name.startsWith("nbd-") || name.startsWith("bridge-") || name.startsWith("ops-")) {
                        ours.add(name);
                        if ((SwapSafety.threadFlags(task.resolve("stat")) & SwapSafety.PF_MEMALLOC_NOIO) == 0) {
                            unflagged.add(name);
                        }
                    }
                }
            }
            assertFalse(ours.isEmpty(), "no serving threads found");
            assertEquals(List.of(), unflagged, "serving threads outside the flusher state, of " + ours);
        }, "--io-flusher", "on");
        assertFalse(log.contains("not in the I/O flusher state"), log);
    }

    @Test
    void aBadIoFlusherValueIsAUsageError() throws Exception {
        Path err = Files.createTempFile("swap-safety", ".err");
        Process p = CliProcess.start(err, "demo", "--listen", "127.0.0.1:0", "--metrics", "none", "--io-flusher",
                "maybe");
        assertTrue(p.waitFor(60, TimeUnit.SECONDS));
        String log = Files.readString(err);
        assertEquals(2, p.exitValue(), log);
        assertTrue(log.contains("--io-flusher must be auto, on or off"), log);
    }
}
