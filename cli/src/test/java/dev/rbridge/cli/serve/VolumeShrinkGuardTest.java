package dev.rbridge.cli.serve;

import dev.rbridge.cli.CliProcess;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A typo must not delete data: restarting serve with a smaller size for an existing volume is refused, naming what
 * would be discarded and the flag that discards it; with --allow-shrink it starts and says exactly which slabs went.
 * Real memserver and bridge processes; the data past the new end is written with nbdsh first.
 */
@Timeout(300)
@Tag("fault")
class VolumeShrinkGuardTest {
    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    @Test
    void aSmallerSizeIsRefusedUnlessAllowedAndThenSaysWhatItDiscards() throws Exception {
        PeerTool.require("nbdsh", "libnbd-bin");
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("shrink").memservers(2)
                .volume("disk,size=64M,replicas=2,slab=4M").start())) {
            // Data in slab 12 (48..52 MiB), past the 32M the typo asks for.
            PeerTool.check(60, "nbdsh", "-u", c.uri("disk"), "-c", "h.pwrite(b'k' * 65536, 50 * 1024 * 1024)");
            assertEquals(0, c.stopBridge());
            Path dir = Files.createTempDirectory("shrink");

            Proc refused = serve(c, dir, "refused", "disk,size=32M,replicas=2,slab=4M");
            assertEquals(1, refused.code, refused.err);
            assertTrue(refused.err.contains("volume 'disk'") && refused.err.contains("--allow-shrink")
                    && refused.err.contains("slab 12"), refused.err);
            assertFalse(refused.err.contains("\tat "), "a stack trace:\n" + refused.err);

            // Nothing was released: the original size still reads the data back.
            c.startBridge();
            String back = PeerTool.check(60, "nbdsh", "-u", c.uri("disk"), "-c",
                    "print(h.pread(4, 50 * 1024 * 1024))");
            assertTrue(back.contains("kkkk"), back);
            assertEquals(0, c.stopBridge());

            Proc allowed = serve(c, dir, "allowed", "disk,size=32M,replicas=2,slab=4M", "--allow-shrink");
            assertEquals(0, allowed.code, allowed.err);
            assertTrue(allowed.err.contains("shrinking") && allowed.err.contains("slab 12"), allowed.err);
        }
    }

    private record Proc(int code, String err) {
    }

    /** Runs serve on the cluster's memservers; one that starts is stopped (SIGTERM) once it serves. */
    private static Proc serve(ServeCluster c, Path dir, String name, String volume, String... more) throws Exception {
        List<String> args = new ArrayList<>(List.of("serve", "--listen", "127.0.0.1:0", "--admin", "none",
                "--metrics", "none", "--volume", volume, "--start-wait", "5"));
        for (ServeCluster.Memserver m : c.memservers()) {
            args.addAll(List.of("--memserver", m.address()));
        }
        args.addAll(List.of(more));
        Path log = dir.resolve(name + ".log");
        Process p = CliProcess.start(log, args.toArray(String[]::new));
        String first = new java.io.BufferedReader(new java.io.InputStreamReader(p.getInputStream())).readLine();
        if (first != null && first.contains("serving")) {
            p.destroy();
        }
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "serve did not end:\n" + Files.readString(log));
        return new Proc(first != null && first.contains("serving") ? 0 : p.exitValue(), Files.readString(log));
    }
}
