package dev.rbridge.cli.partition;

import dev.rbridge.cli.history.BlockTarget;
import dev.rbridge.cli.history.History;
import dev.rbridge.cli.history.History.Kind;
import dev.rbridge.cli.history.History.Outcome;
import dev.rbridge.cli.history.RegisterChecker;
import dev.rbridge.cli.history.VersionedWorkload;
import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Partitions between rbridge's processes for real ({@link PartitionLab}): memservers, the bridge and the NBD clients
 * (fio, and libnbd clients of the history checker) each in a network namespace of its own; the cut side keeps running
 * and keeps trying.
 */
@Timeout(240)
@Tag("fault")
class PartitionFaultTest {
    private static final long MiB = 1 << 20;
    private static final long WRITTEN = 96 * MiB;
    private static final int BLOCK = 4096;
    /** The history's blocks: 16 across the boundary of slabs 13 and 14 (8 MiB), beyond fio's 96 MiB. */
    private static final long HISTORY_FIRST = 112 * MiB / BLOCK - 8;
    private static final long HISTORY_BLOCKS = 16;

    @BeforeAll
    static void available() {
        PartitionLab.assumeAvailable();
        PeerTool.require("fio", "fio");
        PeerTool.check(30, "/usr/bin/python3", "-I", "-c", "import nbd");
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

    /**
     * fio (write, then verify) and four history writers on 16 overlapping blocks run while the bridge is cut from m1
     * for 10 s: fio reads back every byte, the history is linearizable, the volume turns healthy with every slab on
     * both memservers, and with m0 cut in turn m1 alone serves fio's data and the history's last values.
     */
    @Test
    void aBridgeCutFromOneMemserverForTenSecondsUnderWritesLosesNoAcknowledgedWriteAndTheReplicasConverge()
            throws Exception {
        try (PartitionLab lab = PartitionLab.create("m0", "m1", "bridge", "client")) {
            // The lab's addresses are not loopback, so rbridge wants the memservers' token and, for NBD in clear
            // (fio's nbd engine, libnbd), --insecure: as on a real network, though this one reaches only the lab.
            LabAdmin admin = LabAdmin.create(lab);
            LabRbridge m0 = LabRbridge.memserver(lab, "m0", "512M", admin.tokenArgs());
            LabRbridge m1 = LabRbridge.memserver(lab, "m1", "512M", admin.tokenArgs());
            List<String> bridgeArgs = new ArrayList<>(List.of(admin.tokenArgs()));
            bridgeArgs.addAll(List.of("--insecure", "--timeout", "2", "--volume",
                    "disk,size=128M,replicas=2,slab=8M"));
            LabRbridge bridge = LabRbridge.bridge(lab, "bridge", List.of(m0, m1), bridgeArgs.toArray(String[]::new));
            LabRbridge[] all = {m0, m1, bridge};

            // fio in the client node writes 96 MiB at 4 MiB/s (about 24 s, so the whole cut falls inside the
            // writes and writes go on during the resync after it), then reads every block back and checks it.
            Path fioOut = lab.logDir().resolve("fio.json");
            Process fio = lab.start(new ProcessBuilder(lab.command("client", fio(bridge.uri("disk"), "--rate=4m")))
                    .redirectErrorStream(true).redirectOutput(fioOut.toFile()));
            BlockTarget.Connector clients = LabHistory.connector(lab, "client", bridge.uri("disk"));
            long historyStart = System.nanoTime();
            VersionedWorkload.Running history = VersionedWorkload.builder(clients).writers(4)
                    .blocks(HISTORY_FIRST, HISTORY_BLOCKS).blockBytes(BLOCK).readPercent(50)
                    .duration(Duration.ofSeconds(120)).build().start();
            // Cut only once a slab that fio writes has a replica on m1, and the history has written, so the cut hits
            // acknowledged data.
            LabAdmin.await("a slab placed on m1 and history writes acknowledged", Duration.ofSeconds(30),
                    () -> history.history().count(Kind.WRITE).get(Outcome.OK) >= 20 && admin.slabs(bridge, "disk")
                            .stream().anyMatch(s -> ServeCluster.replicaServers(s).contains(m1.address())),
                    all);
            assertTrue(fio.isAlive(), "fio finished before the cut: " + Files.readString(fioOut));

            lab.cut("bridge", "m1");
            long cutAt = System.nanoTime();
            LabAdmin.await("the bridge marking m1 down", Duration.ofSeconds(10),
                    () -> admin.memserverState(bridge, m1).equals("down"), all);
            LabAdmin.await("the volume degraded", Duration.ofSeconds(10),
                    () -> admin.volumeState(bridge).equals("degraded"), all);
            long whenDegraded = history.history().count(Kind.WRITE).get(Outcome.OK);
            // The partition lasts 10 s by design (this is the fault, not a wait for a condition).
            TimeUnit.NANOSECONDS.sleep(cutAt + TimeUnit.SECONDS.toNanos(10) - System.nanoTime());
            assertTrue(m1.isAlive() && bridge.isAlive(), "a partition is not a kill: both sides still run");
            assertTrue(fio.isAlive(), "the writes went on through the cut: " + Files.readString(fioOut));
            lab.heal("bridge", "m1");
            long healAt = System.nanoTime();

            LabAdmin.await("the bridge seeing m1 again", Duration.ofSeconds(30),
                    () -> admin.memserverState(bridge, m1).equals("up"), all);
            assertTrue(fio.waitFor(180, TimeUnit.SECONDS), "fio hung after the heal");
            assertFioClean(fio.exitValue(), Files.readString(fioOut), "write+verify across the partition");

            // Converged: healthy, every written slab on both memservers...
            LabAdmin.await("the volume healthy", Duration.ofSeconds(60),
                    () -> admin.volumeState(bridge).equals("healthy"), all);
            History h = history.finish();
            assertEquals(0L, ((Number) admin.volume(bridge).get("lost")).longValue());
            for (Map<String, Object> slab : admin.slabs(bridge, "disk")) {
                List<String> servers = ServeCluster.replicaServers(slab);
                assertTrue(servers.size() == 2 && servers.contains(m0.address()) && servers.contains(m1.address()),
                        "a slab is not on both memservers: " + slab);
            }
            // ...and m1, the side that was cut off, holds every acknowledged write: with m0 cut off in turn, all
            // reads come from m1, fio's verify and the history's second read pass.
            lab.cut("bridge", "m0");
            Path again = lab.logDir().resolve("fio-verify-m1.json");
            Process verify = lab.start(new ProcessBuilder(lab.command("client", fio(bridge.uri("disk"),
                    "--verify_only"))).redirectErrorStream(true).redirectOutput(again.toFile()));
            long unreadFromM1 = LabHistory.readPass(h, clients, HISTORY_FIRST, HISTORY_BLOCKS, BLOCK);
            assertTrue(verify.waitFor(120, TimeUnit.SECONDS), "fio --verify_only hung with m0 cut off");
            assertFioClean(verify.exitValue(), Files.readString(again), "verify from m1 alone");
            LabAdmin.await("the bridge marking m0 down", Duration.ofSeconds(10),
                    () -> admin.memserverState(bridge, m0).equals("down"), all);

            RegisterChecker.Result result = RegisterChecker.check(h);
            System.out.println("PartitionFaultTest (a): " + history + "\n" + result.report(5));
            assertTrue(result.ok(), result + "\n" + history + String.format("%ncut at %.0f ms of the history, healed"
                    + " at %.0f ms%n", (cutAt - historyStart) / 1e6, (healAt - historyStart) / 1e6)
                    + LabHistory.excerpt(h.operations(), result, h::describe, 3));
            assertEquals(0, history.finalPassUnread(), "the final pass read every block: " + history);
            assertEquals(0, unreadFromM1, "every block read from m1 alone: " + history);
            long ok = h.count(Kind.WRITE).get(Outcome.OK);
            assertTrue(ok - whenDegraded >= 20, "history writes went on after the cut: " + history);
            bridge.terminate(Duration.ofSeconds(15));
        }
    }
}
