package dev.rbridge.cli.serve;

import dev.rbridge.cli.CliProcess;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A volume grows while it serves, by rbridge admin and by a config reload (SIGHUP): libnbd clients that connect
 * afterwards see the new size and can use it, a connection already open keeps the size it was told but may use the new
 * range (as a kernel device resized in place does), a smaller size
 * never shrinks it while serving, a volume that ends inside a slab is refused in one line, and the grown volume comes
 * back with its data after a bridge restart with the new size in its configuration. Real memserver and bridge
 * processes.
 */
@Timeout(300)
@Tag("fault")
class VolumeGrowTest {
    private static final String TOKEN = "volume-grow-token-0123456789abcdef";
    private static final long MIB = 1 << 20;

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    @Test
    void aVolumeGrowsWhileServingAndNewConnectionsSeeTheNewSize() throws Exception {
        PeerTool.require("nbdsh", "libnbd-bin");
        PeerTool.require("nbdinfo", "libnbd-bin");
        Path dir = Files.createTempDirectory("volume-grow");
        Path token = Files.writeString(dir.resolve("token"), TOKEN + "\n");
        Path config = dir.resolve("serve.conf");
        Files.writeString(config, conf(32));
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("grow").memservers(2).token(TOKEN)
                .bridgeArgs("--config", config.toString()).start())) {
            assertEquals(32 * MIB, size(c));
            PeerTool.check(60, "nbdsh", "-u", c.uri("disk"), "-c", "h.pwrite(b'a' * 65536, 30 * 1024 * 1024)");

            // A connection made before the grow, held open across it.
            Path go = dir.resolve("go");
            ProcessBuilder nbdsh = new ProcessBuilder("/usr/bin/nbdsh", "-u", c.uri("disk"), "-c", String.join("\n",
                    "import os, time",
                    "print('before', h.get_size(), flush=True)",
                    "while not os.path.exists('" + go + "'): time.sleep(0.1)",
                    "h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_BOUNDS)",
                    "h.pwrite(b'c' * 65536, 40 * 1024 * 1024)",
                    "print('after', h.get_size(), flush=True)")).redirectErrorStream(true);
            // Debian's python3 carries python3-libnbd; a python earlier on PATH (pyenv, venv) would not.
            nbdsh.environment().put("PATH", "/usr/bin:/bin:" + System.getenv().getOrDefault("PATH", ""));
            Process held = nbdsh.start();
            var heldOut = new java.io.BufferedReader(new java.io.InputStreamReader(held.getInputStream(),
                    StandardCharsets.UTF_8));
            assertEquals("before " + 32 * MIB, heldOut.readLine());

            ServeCluster.AdminRun grown = c.adminCli(token, "grow", "disk", "48M");
            assertEquals(0, grown.code(), grown.out());
            assertEquals(48 * MIB, size(c), "a new connection sees the new size");
            PeerTool.check(60, "nbdsh", "-u", c.uri("disk"), "-c", "h.pwrite(b'b' * 65536, 44 * 1024 * 1024)");
            Files.writeString(go, "");
            assertEquals("after " + 32 * MIB, heldOut.readLine(), "an open connection keeps the size it was told");
            assertTrue(held.waitFor(30, TimeUnit.SECONDS));
            assertEquals(0, held.exitValue(), "the server serves the new range on a connection opened before");
            String past = PeerTool.check(60, "nbdsh", "-u", c.uri("disk"), "-c", "print(h.pread(4, 40 * 1024 * 1024))");
            assertTrue(past.contains("cccc"), past);

            // A config reload grows it further; a smaller size in the file never shrinks it.
            Files.writeString(config, conf(64));
            hup(c);
            c.awaitAdmin("/volumes", v -> sizeOf(v) == 64 * MIB, Duration.ofSeconds(30));
            Files.writeString(config, conf(16));
            hup(c);
            c.bridge().awaitLog("a volume never shrinks while it serves", Duration.ofSeconds(30));
            assertEquals(64 * MIB, sizeOf(c.admin("/volumes")));

            ServeCluster.AdminRun shrink = c.adminCli(token, "grow", "disk", "40M");
            assertEquals(1, shrink.code(), shrink.out());
            assertTrue(shrink.out().contains("--allow-shrink") && shrink.out().lines().count() == 1, shrink.out());
            ServeCluster.AdminRun odd = c.adminCli(token, "grow", "odd", "8M");
            assertEquals(1, odd.code(), odd.out());
            assertTrue(odd.out().contains("ends inside a slab"), odd.out());
            ServeCluster.AdminRun missing = c.adminCli(token, "grow", "nope", "8M");
            assertEquals(1, missing.code(), missing.out());
            assertTrue(missing.out().contains("no volume nope"), missing.out());

            // 32G of 1M slabs fill the allocation manifest's page: growing past it needs a restart, which works.
            PeerTool.check(60, "nbdsh", "-u", c.uri("big"), "-c", "h.pwrite(b'g' * 4096, 0)");
            ServeCluster.AdminRun big = c.adminCli(token, "grow", "big", "33G");
            assertEquals(1, big.code(), big.out());
            assertTrue(big.out().contains("restart the bridge with the new size"), big.out());

            // With the new sizes in the configuration, a restarted bridge finds every slab, old and new.
            Files.writeString(config, conf(64, 33));
            c.restartBridge();
            assertEquals(33L << 30, Long.parseLong(PeerTool.check(60, "nbdinfo", "--size", c.uri("big")).trim()));
            String g = PeerTool.check(60, "nbdsh", "-u", c.uri("big"), "-c",
                    "h.pwrite(b'h' * 4096, 32 * 1024 ** 3 + 4096); print(h.pread(4, 0), h.pread(4, 32 * 1024 ** 3 + 4096))");
            assertTrue(g.contains("b'gggg') bytearray(b'hhhh')"), g);
            assertEquals(64 * MIB, size(c));
            String back = PeerTool.check(60, "nbdsh", "-u", c.uri("disk"), "-c",
                    "print(h.pread(4, 30 * 1024 * 1024), h.pread(4, 44 * 1024 * 1024))");
            assertTrue(back.contains("b'aaaa') bytearray(b'bbbb')"), back);
            assertFalse(c.bridge().log().contains("\tat "), "a stack trace in the bridge's log");
        }
    }

    private static String conf(int mib) {
        return conf(mib, 32);
    }

    /** disk of {@code mib} MiB, odd (ends inside a slab) and big: {@code bigGib} GiB of 1 MiB slabs. */
    private static String conf(int mib, int bigGib) {
        return "volume = disk,size=" + mib + "M,replicas=2,slab=4M\nvolume = odd,size=6M,replicas=1,slab=4M\n"
                + "volume = big,size=" + bigGib + "G,replicas=1,slab=1M\n";
    }

    private static long size(ServeCluster c) {
        return Long.parseLong(PeerTool.check(60, "nbdinfo", "--size", c.uri("disk")).trim());
    }

    @SuppressWarnings("unchecked")
    private static long sizeOf(Object volumes) {
        return ((List<Object>) volumes).stream().map(v -> (Map<String, Object>) v)
                .filter(v -> "disk".equals(v.get("name"))).mapToLong(v -> ((Number) v.get("size")).longValue())
                .findFirst().orElse(-1);
    }

    private static void hup(ServeCluster c) throws Exception {
        Process hup = new ProcessBuilder("kill", "-HUP", Long.toString(c.bridge().pid())).start();
        assertTrue(hup.waitFor(10, TimeUnit.SECONDS));
    }
}
