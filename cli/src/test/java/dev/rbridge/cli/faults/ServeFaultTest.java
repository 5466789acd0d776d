package dev.rbridge.cli.faults;

import dev.rbridge.cli.Main;
import dev.rbridge.cli.history.History;
import dev.rbridge.cli.history.LibnbdTarget;
import dev.rbridge.cli.history.RegisterChecker;
import dev.rbridge.cli.history.VersionedWorkload;
import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Faults for real: memservers and the bridge are separate processes, killed with SIGKILL and frozen with SIGSTOP,
 * while real NBD clients (fio's nbd engine, libnbd) drive I/O and check every byte.
 */
@Timeout(300)
@Tag("fault")
class ServeFaultTest {
    private static final long MiB = 1 << 20;
    private static final Pattern PROBE = Pattern.compile(
            "\\{\"slab\": (\\d+), \"ok\": (true|false), \"errno\": \"(\\w*)\", \"seconds\": ([\\d.]+)}");

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    @BeforeAll
    static void peers() {
        PeerTool.require("fio", "fio");
        PeerTool.require("nbdcopy", "libnbd-bin");
        PeerTool.check(30, "python3", "-c", "import nbd");
    }

    private static String script(String name) {
        try {
            return Path.of(ServeFaultTest.class.getResource("/faults/" + name).toURI()).toString();
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The versioned workload's first block: 192 MiB, past fio's 160 MiB; its 64 blocks end in the next slab. */
    private static final long HISTORY_FIRST_BLOCK = (192L << 20) / 4096 - 32;

    private static List<String> fio(String uri, String... extra) {
        List<String> cmd = new ArrayList<>(List.of("fio", "--name=verify", "--ioengine=nbd", "--uri=" + uri,
                "--rw=randwrite", "--bs=64k", "--iodepth=16", "--size=160M", "--randrepeat=1", "--verify=crc32c",
                "--do_verify=1", "--verify_fatal=1", "--verify_state_save=0", "--output-format=json"));
        cmd.addAll(List.of(extra));
        return cmd;
    }

    private static void assertFioClean(PeerTool.Result r, String what) {
        assertEquals(0, r.exitCode(), what + ": fio failed:\n" + r.output());
        assertTrue(r.output().contains("\"error\" : 0"), what + ":\n" + r.output());
        assertTrue(!r.output().contains("verify: bad") && !r.output().contains("crc32c: verify failed"), r.output());
        Matcher read = Pattern.compile("\"read\" : \\{\\s*\"io_bytes\" : (\\d+)").matcher(r.output());
        assertTrue(read.find() && Long.parseLong(read.group(1)) == 160 * MiB,
                what + ": fio must read back (verify) every byte it wrote:\n" + r.output());
    }

    private static String state(ServeCluster c, String volume) {
        return String.valueOf(c.volume(volume).get("state"));
    }

    @Test
    void r2KillOneMemserverDuringFioVerifyThenRebuildThenKillASecondLosesNothing() throws Exception {
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("kill-r2").memservers(3).capacity("1G").timeout("2")
                .volume("disk,size=256M,replicas=2,slab=8M").start())) {
            // fio writes 160 MiB at a limited rate (so the kill lands mid-run), then reads everything back and checks.
            ProcessBuilder pb = new ProcessBuilder(fio(c.uri("disk"), "--rate=64m")).redirectErrorStream(true);
            Path out = Files.createTempFile("fio", ".json");
            pb.redirectOutput(out.toFile());
            Process fio = pb.start();
            // fio writes each block once, so a block that fell back to an older version of itself would pass its
            // verify. Beside it, a versioned workload rewrites 64 blocks past fio's range (across a slab boundary)
            // through the kill and the rebuild, and its history must be linearizable: every read returns the
            // latest acknowledged version, or one still in flight.
            VersionedWorkload.Running versions = VersionedWorkload.builder(LibnbdTarget.connector(c.uri("disk")))
                    .writers(2).blocks(HISTORY_FIRST_BLOCK, 64).readPercent(50).duration(Duration.ofMinutes(5))
                    .build().start();
            // A slab has a replica on memserver 0 (so the kill fails one over), and the kill lands while fio writes.
            // Waiting only for "allocated > 0" let the kill land while the first slab's placement on it was in flight.
            String victim = c.memserver(0).address();
            c.awaitAdmin("/volumes", v -> c.slabs("disk", false).stream()
                    .anyMatch(s -> ServeCluster.replicaServers(s).contains(victim)), Duration.ofSeconds(30));
            assertTrue(fio.isAlive(), "fio finished before the kill: " + Files.readString(out));
            long beforeKill = versions.operations();
            c.memserver(0).kill9();
            assertTrue(fio.waitFor(120, TimeUnit.SECONDS), "fio hung after a memserver died");
            assertFioClean(new PeerTool.Result(fio.exitValue(), Files.readString(out)), "write+verify across the kill");

            assertTrue(c.bridge().log().contains("failed") && c.bridge().log().contains("generation 2"),
                    "the bridge logged the failover");
            c.awaitAdmin("/volumes", v -> state(c, "disk").equals("healthy"), Duration.ofSeconds(60));
            assertTrue(c.bridge().log().contains("rebuilt onto"), "slabs were rebuilt");
            for (Map<String, Object> slab : c.slabs("disk", false)) {
                List<String> servers = ServeCluster.replicaServers(slab);
                assertEquals(2, servers.size(), slab.toString());
                assertTrue(!servers.contains(c.memserver(0).address()), "a dead memserver still holds " + slab);
            }
            assertTrue(versions.operations() > beforeKill + 100, "the versioned workload went on after the kill: "
                    + versions);
            History h = versions.finish();
            RegisterChecker.Result result = RegisterChecker.check(h);
            assertTrue(result.ok(), "versions across the kill and the rebuild: " + result + "\n" + versions);
            assertEquals(0, versions.finalPassUnread(), versions.toString());
            assertEquals(0, h.count(History.Kind.WRITE).get(History.Outcome.FAILED), "R=2: no write fails over a "
                    + "single memserver's death: " + versions);

            c.memserver(1).kill9(); // an original replica of many slabs: every slab still has one on memserver 2
            PeerTool.Result again = PeerTool.run(120, fio(c.uri("disk"), "--verify_only"));
            assertFioClean(again, "verify after the second kill");
            c.awaitAdmin("/volumes", v -> state(c, "disk").equals("degraded"), Duration.ofSeconds(30));
            assertEquals(0L, ((Number) c.volume("disk").get("lost")).longValue());
        }
    }

    @Test
    void r1LostSlabsFailWithEioWithinTheTimeoutAndOtherVolumesKeepWorking() throws Exception {
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("kill-r1").memservers(2).timeout("2")
                .volume("one,size=64M,replicas=1,slab=4M").volume("two,size=64M,replicas=1,slab=4M").start())) {
            String one = c.uri("one");
            String two = c.uri("two");
            // Write every slab of both volumes whole: every slab gets placed somewhere.
            assertTrue(probe(PeerTool.check(60, "python3", script("slab_probe.py"), one, String.valueOf(4 * MiB),
                    "--write")).stream().allMatch(Probe::ok));
            assertTrue(probe(PeerTool.check(60, "python3", script("slab_probe.py"), two, String.valueOf(4 * MiB),
                    "--write")).stream().allMatch(Probe::ok));
            String dead = c.memserver(0).address();
            Map<Integer, String> placedOne = placement(c, "one");
            Map<Integer, String> placedTwo = placement(c, "two");
            c.memserver(0).kill9();

            long t0 = System.nanoTime();
            List<Probe> probe = probe(PeerTool.check(120, "python3", script("slab_probe.py"), one,
                    String.valueOf(4 * MiB), "--expect"));
            long failed = probe.stream().filter(p -> !p.ok()).count();
            assertTrue(failed > 0 && failed < 16, "slabs were spread over both memservers and those on the dead one"
                    + " fail: " + failed + " of 16 failed");
            assertFailsExactlyOn(probe, placedOne, dead);
            assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(20), "EIO must come within the timeout");
            assertTrue(c.bridge().isAlive());
            c.awaitAdmin("/volumes", v -> state(c, "one").equals("lost"), Duration.ofSeconds(30));

            // The other volume: its slabs on the survivor take a new pattern and read it back, those on the dead
            // memserver fail with EIO, and nothing else (a mismatch or another errno) happens.
            List<Probe> other = probe(PeerTool.check(120, "python3", script("slab_probe.py"), two,
                    String.valueOf(4 * MiB), "--write", "--seed", "1"));
            assertTrue(other.stream().anyMatch(Probe::ok), "the surviving slabs of another volume keep working");
            assertFailsExactlyOn(other, placedTwo, dead);
        }
    }

    /** Slab index -> the memserver holding its only replica (R=1). */
    private static Map<Integer, String> placement(ServeCluster c, String volume) {
        Map<Integer, String> out = new java.util.HashMap<>();
        for (Map<String, Object> slab : c.slabs(volume, false)) {
            List<String> on = ServeCluster.replicaServers(slab);
            assertEquals(1, on.size(), slab.toString());
            out.put(((Number) slab.get("slab")).intValue(), on.getFirst());
        }
        return out;
    }

    /** Every slab placed on {@code dead} fails with EIO, every other one works: nothing more, nothing less. */
    private static void assertFailsExactlyOn(List<Probe> probe, Map<Integer, String> placed, String dead) {
        assertEquals(placed.size(), probe.size(), "every slab was written before, so every slab is placed: " + placed);
        for (Probe p : probe) {
            boolean onDead = dead.equals(placed.get(p.slab()));
            if (onDead) {
                assertEquals("EIO", p.errno(), "slab " + p.slab() + " lived on the dead memserver: " + probe);
            } else {
                assertTrue(p.ok(),
                        "slab " + p.slab() + " lives on the survivor " + placed.get(p.slab()) + ": " + probe);
            }
        }
    }

    record Probe(int slab, boolean ok, String errno, double seconds) {
    }

    private static List<Probe> probe(String json) {
        return probe(json, 8);
    }

    private static List<Probe> probe(String json, double maxSeconds) {
        List<Probe> out = new ArrayList<>();
        Matcher m = PROBE.matcher(json);
        while (m.find()) {
            Probe p = new Probe(Integer.parseInt(m.group(1)), m.group(2).equals("true"), m.group(3),
                    Double.parseDouble(m.group(4)));
            // With --timeout 2, a request to a dead or frozen memserver is answered within the timeout plus a retry
            // elsewhere; 8 s leaves a loaded machine room but still catches a request that waited for a thaw.
            assertTrue(p.seconds() < maxSeconds, "a request took " + p.seconds() + " s: " + json);
            out.add(p);
        }
        assertTrue(!out.isEmpty(), "no probe output: " + json);
        return out;
    }

    @Test
    void aBridgeKilledMidWriteRestartsWithEveryAcknowledgedWriteIntact() throws Exception {
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("kill-bridge").memservers(2)
                .volume("disk,size=256M,replicas=2,slab=16M").start())) {
            Path dir = Files.createTempDirectory("killbridge");
            Path image = dir.resolve("image");
            byte[] data = new byte[(int) (64 * MiB)];
            new Random(42).nextBytes(data);
            Files.write(image, data);
            PeerTool.check(120, "nbdcopy", image.toString(), c.uri("disk")); // acknowledged (and flushed) in full
            String before = PeerTool.check(30, "sha256sum", image.toString()).split(" ")[0];

            // A writer acknowledges block after block above the image; the bridge dies under it.
            Process writer = new ProcessBuilder("/usr/bin/python3", script("acked_writer.py"), c.uri("disk"),
                    String.valueOf(64 * MiB), String.valueOf(64 * 1024), "2048").redirectErrorStream(true).start();
            AtomicLong lastAcked = new AtomicLong(-1);
            Thread reader = Thread.ofPlatform().start(() -> {
                try (BufferedReader r = new BufferedReader(new InputStreamReader(writer.getInputStream(),
                        StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = r.readLine()) != null) {
                        if (line.matches("\\d+")) {
                            lastAcked.set(Long.parseLong(line));
                        }
                    }
                } catch (IOException ignored) {
                    // the writer's connection dies with the bridge; what it printed before is what counts
                }
            });
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (lastAcked.get() < 100 && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            assertTrue(lastAcked.get() >= 100, "the writer made no progress");
            c.killBridge();
            writer.waitFor(30, TimeUnit.SECONDS);
            reader.join(10_000);
            long acked = lastAcked.get();
            assertTrue(acked < 2047, "the bridge died mid-write, not after it");

            c.restartBridge(); // reattaches from the memservers' region lists; the old lease died with the process
            PeerTool.check(120, "python3", script("acked_check.py"), c.uri("disk"), String.valueOf(64 * MiB),
                    String.valueOf(64 * 1024), String.valueOf(acked));
            Path back = dir.resolve("back");
            PeerTool.check(120, "nbdcopy", c.uri("disk"), back.toString());
            PeerTool.check(30, "truncate", "-s", String.valueOf(64 * MiB), back.toString());
            assertEquals(before, PeerTool.check(30, "sha256sum", back.toString()).split(" ")[0],
                    "the image written before the kill reads back identical");
            assertEquals("healthy", state(c, "disk"));
        }
    }

    @Test
    void aSecondBridgeOnTheSameVolumeIsRefusedWithAClearError() throws Exception {
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("lease").memservers(2)
                .volume("disk,size=64M,replicas=2").start())) {
            List<String> cmd = new ArrayList<>(List.of("serve", "--listen", "127.0.0.1:0", "--admin", "none",
                    "--volume", "disk,size=64M,replicas=2", "--start-wait", "5"));
            for (ServeCluster.Memserver m : c.memservers()) {
                cmd.add("--memserver");
                cmd.add(m.address());
            }
            Path log = Files.createTempFile("second", ".log");
            List<String> argv =
                    new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                            "--enable-native-access=ALL-UNNAMED", "-cp", System.getProperty("java.class.path"),
                            Main.class.getName()));
            argv.addAll(cmd);
            Process second = new ProcessBuilder(argv).redirectErrorStream(true).redirectOutput(log.toFile()).start();
            assertTrue(second.waitFor(60, TimeUnit.SECONDS), "the second bridge must not hang");
            assertEquals(1, second.exitValue());
            String text = Files.readString(log);
            assertTrue(text.contains("volume 'disk' is in use by another bridge"), text);
            assertTrue(c.bridge().isAlive());
        }
    }

    /**
     * A bridge that hangs (SIGSTOP: no lease renewal, nothing at all) loses its volume: once the lease lapses another
     * bridge takes it over and serves it. When the hung one wakes up, a client that was connected to it all along
     * gets EIO for the writes it sent, and none of them reaches the memory the new owner serves.
     */
    @Test
    void aHungBridgeLosesItsLeaseToAnotherAndIsFencedWhenItWakes() throws Exception {
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("hung").memservers(2).timeout("2")
                .bridgeArgs("--lease", "3").volume("disk,size=32M,replicas=2,slab=4M").start())) {
            String slab = String.valueOf(4 * MiB);
            assertTrue(probe(PeerTool.check(60, "python3", script("slab_probe.py"), c.uri("disk"), slab, "--write",
                    "--seed", "1")).stream().allMatch(Probe::ok));
            Process late = new ProcessBuilder("/usr/bin/python3", script("slab_probe.py"), c.uri("disk"), slab,
                    "--write", "--seed", "3", "--wait").redirectErrorStream(true).start();
            try {
                BufferedReader lateOut = new BufferedReader(new InputStreamReader(late.getInputStream(),
                        StandardCharsets.UTF_8));
                assertEquals("connected", lateOut.readLine());
                String rival;
                c.bridge().freeze();
                try {
                    rival = c.startRivalBridge(Duration.ofSeconds(60)) + "disk";
                    List<Probe> taken = probe(PeerTool.check(60, "python3", script("slab_probe.py"), rival, slab,
                            "--expect", "--seed", "1"));
                    assertTrue(taken.stream().allMatch(Probe::ok), "the new owner serves the data as it was: " + taken);
                    assertTrue(probe(PeerTool.check(60, "python3", script("slab_probe.py"), rival, slab, "--write",
                            "--seed", "2")).stream().allMatch(Probe::ok));
                    // Sent now, the client's writes wait in the hung bridge's socket until it wakes.
                    late.getOutputStream().write('\n');
                    late.getOutputStream().flush();
                } finally {
                    c.bridge().thaw();
                }
                assertTrue(late.waitFor(90, TimeUnit.SECONDS), "the woken bridge's client hangs");
                String lateJson = new String(late.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
                assertEquals(0, late.exitValue(), lateJson);
                // No bound on time here: what counts is that every request fails, with EIO, instead of hanging.
                List<Probe> fenced = probe(lateJson, 60);
                assertTrue(fenced.stream().allMatch(p -> !p.ok() && p.errno().equals("EIO")),
                        "the woken bridge must refuse every request of its old client with EIO: " + fenced);
                List<Probe> after = probe(PeerTool.check(60, "python3", script("slab_probe.py"), rival, slab,
                        "--expect", "--seed", "2"));
                assertTrue(after.stream().allMatch(Probe::ok), "a write sent to the hung bridge reached the new"
                        + " owner's data: " + after);
                assertTrue(c.bridge().isAlive(), "fenced, not dead");
            } finally {
                late.destroyForcibly();
            }
        }
    }

    @Test
    void aFrozenMemserverIsDetectedByTheTimeoutAndTheVolumeRebuildsElsewhere() throws Exception {
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("sigstop").memservers(3).capacity("1G").timeout("2")
                .volume("disk,size=64M,replicas=2,slab=4M").start())) {
            String uri = c.uri("disk");
            assertTrue(probe(PeerTool.check(60, "python3", script("slab_probe.py"), uri, String.valueOf(4 * MiB),
                    "--write", "--seed", "1")).stream().allMatch(Probe::ok));
            c.memserver(0).freeze();
            try {
                // Every slab still reads and writes (R=2): requests that hit the frozen one wait at most the timeout.
                // The new pattern (seed 2) never reaches the frozen memserver: its replicas keep seed 1 and are stale.
                List<Probe> probe = probe(PeerTool.check(120, "python3", script("slab_probe.py"), uri,
                        String.valueOf(4 * MiB), "--write", "--seed", "2"));
                assertTrue(probe.stream().allMatch(Probe::ok), "a frozen memserver must not fail requests with R=2: "
                        + probe);
                c.awaitAdmin("/memservers", v -> c.memserverStatus().getFirst().get("state").equals("down"),
                        Duration.ofSeconds(30));
                c.awaitAdmin("/volumes", v -> state(c, "disk").equals("healthy"), Duration.ofSeconds(60));
                for (Map<String, Object> slab : c.slabs("disk", false)) {
                    assertTrue(!ServeCluster.replicaServers(slab).contains(c.memserver(0).address()), slab.toString());
                }
            } finally {
                c.memserver(0).thaw();
            }
            // Thawed, it is reachable again; its regions are stale and released, never read: every slab reads the
            // pattern written while it was frozen, not the older one it still holds.
            c.awaitAdmin("/memservers", v -> c.memserverStatus().getFirst().get("state").equals("up"),
                    Duration.ofSeconds(30));
            List<Probe> after = probe(PeerTool.check(120, "python3", script("slab_probe.py"), uri,
                    String.valueOf(4 * MiB), "--expect", "--seed", "2"));
            assertTrue(after.stream().allMatch(Probe::ok), "a stale replica was read after the thaw: " + after);
            assertTrue(c.bridge().log().contains("releasing stale region"), "stale regions were released");
        }
    }

    @Test
    void an128DeepNbdPipelineKeeps128RemoteOperationsInFlight() throws Exception {
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("pipeline").memservers(1).timeout("20")
                .volume("disk,size=16M,replicas=1,slab=4M").start())) {
            String uri = c.uri("disk");
            PeerTool.check(60, "python3", script("stamp_blocks.py"), uri, "128");
            // With the memserver frozen nothing completes, so whatever the bridge has issued stays visible as
            // in flight: every NBD request must have become a remote operation, none held back in a queue.
            c.memserver(0).freeze();
            Process reads = new ProcessBuilder("/usr/bin/python3", script("inflight_reads.py"), uri, "128")
                    .redirectErrorStream(true).start();
            try {
                BufferedReader out = new BufferedReader(new InputStreamReader(reads.getInputStream(),
                        StandardCharsets.UTF_8));
                String first = out.readLine();
                assertTrue(first != null && first.startsWith("submitted"), String.valueOf(first));
                c.awaitAdmin("/memservers", v -> ((Number) c.memserverStatus().getFirst().get("in_flight")).longValue()
                        == 128, Duration.ofSeconds(10));
                c.memserver(0).thaw();
                assertTrue(reads.waitFor(60, TimeUnit.SECONDS));
                String rest = new String(reads.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
                assertEquals(0, reads.exitValue(), rest);
                assertTrue(rest.contains("done 128"), rest);
            } finally {
                c.memserver(0).thaw();
                reads.destroyForcibly();
            }
            c.awaitAdmin("/memservers",
                    v -> ((Number) c.memserverStatus().getFirst().get("in_flight")).longValue() == 0,
                    Duration.ofSeconds(10));
        }
    }
}
