package dev.rbridge.cli;

import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code rbridge serve} and {@code rbridge admin --bridge} as an operator uses them: config file, errors, admin views. */
@Timeout(180)
@Tag("interop")
class ServeCommandTest {
    private static final Pattern SERVING = Pattern.compile("rbridge serve: serving (\\S+)");

    private record Result(int code, String out, String err) {
    }

    private static Result run(Path dir, String... args) throws Exception {
        Path err = Files.createTempFile(dir, "cli", ".err");
        Process p = CliProcess.start(err, args);
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "did not finish: " + String.join(" ", args));
        return new Result(p.exitValue(), out, Files.readString(err));
    }

    @Test
    void configFileAdminViewsAndClearErrors() throws Exception {
        Path dir = Files.createTempDirectory("serve");
        try (ServeCluster c = ServeCluster.builder("serve-cli").memservers(2)
                .volume("disk,size=64M,replicas=2,slab=4M").start()) {
            // admin --bridge: volumes, slab map, memservers, rebuild progress.
            PeerTool.check(60, "nbdsh", "-u", c.uri("disk"), "-c", "h.pwrite(b'x' * 8192, 4 * 1024 * 1024 - 4096)");
            Result volumes = run(dir, "admin", "--bridge", c.adminAddress(), "volumes");
            assertEquals(0, volumes.code(), volumes.err());
            assertTrue(volumes.out().contains("disk") && volumes.out().contains("healthy"), volumes.out());
            // One table style: headers in capitals, byte counts as sizes.
            assertTrue(volumes.out().startsWith("NAME") && volumes.out().contains("SLAB SIZE")
                    && volumes.out().contains("64MiB") && volumes.out().contains("4MiB"), volumes.out());
            Result slabs = run(dir, "admin", "--bridge", c.adminAddress(), "slabs", "disk");
            assertEquals(0, slabs.code(), slabs.err());
            assertEquals(3, slabs.out().strip().lines().count(), "a header and the two slabs the write touched:\n"
                    + slabs.out());
            for (ServeCluster.Memserver m : c.memservers()) {
                assertTrue(slabs.out().contains(m.address() + "#"), slabs.out());
            }
            Result ms = run(dir, "admin", "--bridge", c.adminAddress(), "memservers");
            assertEquals(2, ms.out().lines().filter(l -> l.contains(" up ")).count(), ms.out());
            Result rebuild = run(dir, "admin", "--bridge", c.adminAddress(), "rebuild");
            assertTrue(rebuild.out().contains("nothing to rebuild"), rebuild.out());
            Result rebuildJson = run(dir, "admin", "--bridge", c.adminAddress(), "--json", "rebuild");
            assertTrue(rebuildJson.out().contains("\"queued\":0"), rebuildJson.out());
            Result unknown = run(dir, "admin", "--bridge", c.adminAddress(), "slabs", "nope");
            assertEquals(1, unknown.code());
            assertTrue(unknown.err().contains("no volume 'nope'"), unknown.err());

            // A second bridge configured from a file, on another volume of the same memservers.
            Path config = dir.resolve("bridge.conf");
            Files.writeString(config, "# a second bridge\nlisten = 127.0.0.1:0\nadmin = none\n"
                    + "memserver = " + c.memserver(0).address() + "\nmemserver = " + c.memserver(1).address() + "\n"
                    + "volume = cfg,size=32M,replicas=2\ntimeout = 3\n");
            Path log = dir.resolve("second.log");
            Process second = CliProcess.start(log, "serve", "--config", config.toString());
            try {
                String line = new BufferedReader(new InputStreamReader(second.getInputStream(),
                        StandardCharsets.UTF_8)).readLine();
                Matcher m = SERVING.matcher(String.valueOf(line));
                assertTrue(m.find(), line + "\n" + Files.readString(log));
                assertEquals(String.valueOf(32 << 20), PeerTool.check(60, "nbdinfo", "--size", m.group(1)).strip());
            } finally {
                second.destroy();
                assertTrue(second.waitFor(30, TimeUnit.SECONDS));
            }
        }

        Result badVolume = run(dir, "serve", "--memserver", "127.0.0.1:1", "--volume", "disk,colour=blue");
        assertEquals(2, badVolume.code());
        assertTrue(badVolume.err().contains("unknown volume attribute 'colour'"), badVolume.err());
        Result tooManyReplicas = run(dir, "serve", "--memserver", "127.0.0.1:1", "--volume", "disk,replicas=2");
        assertEquals(2, tooManyReplicas.code());
        assertTrue(tooManyReplicas.err().contains("only 1 memserver(s) are configured"), tooManyReplicas.err());
        Result noLanes = run(dir, "serve", "--memserver", "127.0.0.1:1", "--volume", "disk", "--lanes", "0");
        assertEquals(2, noLanes.code());
        assertTrue(noLanes.err().contains("--lanes must be between 1 and 16: 0"), noLanes.err());
        Result slowRebuild = run(dir, "serve", "--memserver", "127.0.0.1:1", "--volume", "disk", "--rebuild-rate",
                "64K");
        assertEquals(2, slowRebuild.code());
        assertTrue(slowRebuild.err().contains("rebuild rate must be at least 1M a second (or 0 for no limit): 65536"),
                slowRebuild.err());
        Result oddChunk = run(dir, "serve", "--memserver", "127.0.0.1:1", "--volume", "disk", "--rebuild-chunk", "3M");
        assertEquals(2, oddChunk.code());
        assertTrue(oddChunk.err().contains("rebuild chunk must be a power of two from 4K to 16M"), oddChunk.err());
        Result ucxLanes = run(dir, "serve", "--memserver", "127.0.0.1:1", "--volume", "disk", "--transport", "ucx",
                "--lanes", "2");
        assertEquals(2, ucxLanes.code());
        assertTrue(ucxLanes.err().contains("--lanes applies to the tcp transport only"), ucxLanes.err());
        Result nobody = run(dir, "serve", "--memserver", "127.0.0.1:1", "--volume", "disk", "--start-wait", "1",
                "--admin", "none");
        assertEquals(1, nobody.code());
        assertTrue(nobody.err().contains("no memserver is reachable (127.0.0.1:1:"), nobody.err());
        Path badConfig = dir.resolve("bad.conf");
        Files.writeString(badConfig, "memservr = 127.0.0.1:1\n");
        Result typo = run(dir, "serve", "--config", badConfig.toString());
        assertEquals(2, typo.code());
        assertTrue(typo.err().contains("bad.conf:1: unknown option 'memservr'"), typo.err());
    }
}
