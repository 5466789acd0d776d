package dev.rbridge.cli.partition;

import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Partitions between rbridge's processes for real ({@link PartitionLab}): memservers, the bridge and the NBD client
 * (fio) each in a network namespace of its own; the cut side keeps running and keeps trying.
 */
@Timeout(240)
@Tag("fault")
class PartitionFaultTest {
    private static final long MiB = 1 << 20;
    private static final long WRITTEN = 96 * MiB;
    private static final int PROBE_PORT = 7000;
    /** The memservers' token, which the bridge's admin interface also asks for. */
    private static String secret;

    @BeforeAll
    static void available() {
        PartitionLab.assumeAvailable();
        PeerTool.require("fio", "fio");
    }

    private static List<String> fio(String uri, String... extra) {
        List<String> cmd = new ArrayList<>(List.of("fio", "--name=verify", "--ioengine=nbd", "--uri=" + uri,
                "--rw=randwrite", "--bs=64k", "--iodepth=16", "--size=" + WRITTEN / MiB + "M", "--randrepeat=1",
                "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--verify_state_save=0",
                "--output-format=json"));
        cmd.addAll(List.of(extra));
        return cmd;
    }

    private static void assertFioClean(int code, String output, String what) {
        assertEquals(0, code, what + ": fio failed:\n" + output);
        assertTrue(output.contains("\"error\" : 0"), what + ":\n" + output);
        assertTrue(!output.contains("verify: bad") && !output.contains("crc32c: verify failed"), output);
        Matcher read = Pattern.compile("\"read\" : \\{\\s*\"io_bytes\" : (\\d+)").matcher(output);
        assertTrue(read.find() && Long.parseLong(read.group(1)) == WRITTEN,
                what + ": fio must read back (verify) every byte it wrote:\n" + output);
    }

    /** GET on the bridge's admin interface, from a probe in the bridge's node (its loopback: no cut touches it). */
    private static Object admin(NetProbe.Remote probe, LabRbridge bridge, String path) throws IOException {
        String r = probe.ask("get " + bridge.adminUrl() + path.substring(1) + " " + secret);
        if (!r.startsWith("http 200 ")) {
            throw new IllegalStateException("GET " + path + ": " + r);
        }
        return ServeCluster.Json.parse(r.substring("http 200 ".length()));
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> memserver(NetProbe.Remote probe, LabRbridge bridge, LabRbridge m)
            throws IOException {
        for (Map<String, Object> s : (List<Map<String, Object>>) admin(probe, bridge, "/memservers")) {
            if (m.address().equals(s.get("memserver"))) {
                return s;
            }
        }
        throw new IllegalStateException("no memserver " + m.address() + " in " + admin(probe, bridge, "/memservers"));
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> volume(NetProbe.Remote probe, LabRbridge bridge) throws IOException {
        return ((List<Map<String, Object>>) admin(probe, bridge, "/volumes")).getFirst();
    }

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> slabs(NetProbe.Remote probe, LabRbridge bridge) throws IOException {
        return (List<Map<String, Object>>) admin(probe, bridge, "/volumes/disk/slabs");
    }

    private interface Check {
        boolean holds() throws IOException;
    }

    private static void await(String what, Duration timeout, Check check, LabRbridge... logs) throws Exception {
        long deadline = System.nanoTime() + timeout.toNanos();
        Exception last = null;
        while (System.nanoTime() < deadline) {
            try {
                if (check.holds()) {
                    return;
                }
            } catch (IOException | RuntimeException e) {
                last = e;
            }
            Thread.sleep(100);
        }
        StringBuilder b = new StringBuilder(what + " did not happen within " + timeout + (last == null ? ""
                : "; last error: " + last) + "\n");
        for (LabRbridge p : logs) {
            b.append(p.tails());
        }
        throw new AssertionError(b.toString());
    }

    @Test
    void aBridgeCutFromOneMemserverForTenSecondsUnderWritesLosesNoAcknowledgedWriteAndTheReplicasConverge()
            throws Exception {
        try (PartitionLab lab = PartitionLab.create("m0", "m1", "bridge", "client")) {
            // The lab's addresses are not loopback, so rbridge wants the memservers' token and, for NBD in clear
            // (fio's nbd engine), --insecure: as on a real network, though this one reaches only the lab's nodes.
            String token = lab.logDir().resolve("token").toString();
            secret = HexFormat.of().formatHex(new SecureRandom().generateSeed(32));
            Files.writeString(Path.of(token), secret + "\n");
            LabRbridge m0 = LabRbridge.memserver(lab, "m0", "512M", "--token-file", token);
            LabRbridge m1 = LabRbridge.memserver(lab, "m1", "512M", "--token-file", token);
            LabRbridge bridge = LabRbridge.bridge(lab, "bridge", List.of(m0, m1), "--token-file", token, "--insecure",
                    "--timeout", "2", "--volume", "disk,size=128M,replicas=2,slab=8M");
            LabRbridge[] all = {m0, m1, bridge};
            NetProbe.Remote operator = NetProbe.Remote.start(lab, "bridge", PROBE_PORT);

            // fio in the client node writes 96 MiB at 4 MiB/s (about 24 s, so the whole cut falls inside the
            // writes and writes go on during the resync after it), then reads every block back and checks it.
            Path fioOut = lab.logDir().resolve("fio.json");
            Process fio = lab.start(new ProcessBuilder(lab.command("client", fio(bridge.uri("disk"), "--rate=4m")))
                    .redirectErrorStream(true).redirectOutput(fioOut.toFile()));
            // Cut only once a slab that fio writes has a replica on m1, so the cut hits acknowledged data.
            await("a slab placed on m1", Duration.ofSeconds(30), () -> slabs(operator, bridge).stream()
                    .anyMatch(s -> ServeCluster.replicaServers(s).contains(m1.address())), all);
            assertTrue(fio.isAlive(), "fio finished before the cut: " + Files.readString(fioOut));

            lab.cut("bridge", "m1");
            long cutAt = System.nanoTime();
            await("the bridge marking m1 down", Duration.ofSeconds(10),
                    () -> memserver(operator, bridge, m1).get("state").equals("down"), all);
            await("the volume degraded", Duration.ofSeconds(10),
                    () -> volume(operator, bridge).get("state").equals("degraded"), all);
            // The partition lasts 10 s by design (this is the fault, not a wait for a condition).
            TimeUnit.NANOSECONDS.sleep(cutAt + TimeUnit.SECONDS.toNanos(10) - System.nanoTime());
            assertTrue(m1.isAlive() && bridge.isAlive(), "a partition is not a kill: both sides still run");
            assertTrue(fio.isAlive(), "the writes went on through the cut: " + Files.readString(fioOut));
            lab.heal("bridge", "m1");

            await("the bridge seeing m1 again", Duration.ofSeconds(30),
                    () -> memserver(operator, bridge, m1).get("state").equals("up"), all);
            assertTrue(fio.waitFor(180, TimeUnit.SECONDS), "fio hung after the heal");
            assertFioClean(fio.exitValue(), Files.readString(fioOut), "write+verify across the partition");

            // Converged: healthy, every written slab on both memservers...
            await("the volume healthy", Duration.ofSeconds(60),
                    () -> volume(operator, bridge).get("state").equals("healthy"), all);
            assertEquals(0L, ((Number) volume(operator, bridge).get("lost")).longValue());
            for (Map<String, Object> slab : slabs(operator, bridge)) {
                List<String> servers = ServeCluster.replicaServers(slab);
                assertTrue(servers.size() == 2 && servers.contains(m0.address()) && servers.contains(m1.address()),
                        "a slab is not on both memservers: " + slab);
            }
            // ...and m1, the side that was cut off, holds every acknowledged write: with m0 cut off in turn, all
            // reads come from m1 and verify.
            lab.cut("bridge", "m0");
            Path again = lab.logDir().resolve("fio-verify-m1.json");
            Process verify = lab.start(new ProcessBuilder(lab.command("client", fio(bridge.uri("disk"),
                    "--verify_only"))).redirectErrorStream(true).redirectOutput(again.toFile()));
            assertTrue(verify.waitFor(120, TimeUnit.SECONDS), "fio --verify_only hung with m0 cut off");
            assertFioClean(verify.exitValue(), Files.readString(again), "verify from m1 alone");
            await("the bridge marking m0 down", Duration.ofSeconds(10),
                    () -> memserver(operator, bridge, m0).get("state").equals("down"), all);
            bridge.terminate(Duration.ofSeconds(15));
        }
    }
}
