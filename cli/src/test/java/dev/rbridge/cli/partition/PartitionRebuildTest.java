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

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A memserver cut from the bridge, and from nothing else, while the bridge's NBD clients keep writing
 * ({@link PartitionLab}): with three memservers and two replicas the bridge has somewhere to rebuild.
 */
@Timeout(180)
@Tag("fault")
class PartitionRebuildTest {
    private static final int BLOCK = 4096;
    private static final String VOLUME = "disk";
    private static final long SLAB = 8L << 20;
    /** 16 blocks across the boundary of slabs 1 and 2, written over and over (writes to one block overlap). */
    private static final long FIRST = 2 * SLAB / BLOCK - 8;
    private static final long BLOCKS = 16;
    /**
     * 1024 blocks at the start of slab 1, written before the cut and only read from then on, so a rebuilt replica
     * must have copied them: the hot blocks are rewritten every few milliseconds, which would hide a rebuild that
     * copied nothing (seen: such a rebuild passed with the hot blocks alone).
     */
    private static final long COLD_FIRST = SLAB / BLOCK;
    private static final long COLD_BLOCKS = 1024;

    @BeforeAll
    static void available() {
        PartitionLab.assumeAvailable();
        PeerTool.check(30, "/usr/bin/python3", "-I", "-c", "import nbd");
    }

    /**
     * Four history writers on 16 overlapping blocks, and two readers on 1024 blocks written before the cut; a
     * memserver holding a replica of their slab is cut from the bridge: the bridge marks it down, the slab is rebuilt
     * on the third memserver while the cut lasts (10 s at least), the cut heals and the writes go on. Both histories
     * are linearizable, the volume healthy with every slab on two memservers, and, read straight from the memservers
     * once the bridge has stopped, every slab's replicas hold the same bytes.
     */
    @Test
    void aMemserverCutFromTheBridgeUnderWritesIsRebuiltElsewhereAndTheHistoryStaysLinearizable() throws Exception {
        try (PartitionLab lab = PartitionLab.create("m0", "m1", "m2", "bridge", "client")) {
            LabAdmin admin = LabAdmin.create(lab);
            List<LabRbridge> memservers = new ArrayList<>();
            for (String node : List.of("m0", "m1", "m2")) {
                memservers.add(LabRbridge.memserver(lab, node, "256M", admin.tokenArgs()));
            }
            List<String> args = new ArrayList<>(List.of(admin.tokenArgs()));
            args.addAll(List.of("--insecure", "--timeout", "2", "--volume",
                    VOLUME + ",size=32M,replicas=2,slab=" + SLAB));
            LabRbridge bridge = LabRbridge.bridge(lab, "bridge", memservers, args.toArray(String[]::new));
            List<LabRbridge> everyone = new ArrayList<>(memservers);
            everyone.add(bridge);
            LabRbridge[] all = everyone.toArray(LabRbridge[]::new);

            BlockTarget.Connector clients = LabHistory.connector(lab, "client", bridge.uri(VOLUME));
            VersionedWorkload.Running coldWrites = VersionedWorkload.builder(clients).writers(2)
                    .blocks(COLD_FIRST, COLD_BLOCKS).blockBytes(BLOCK).readPercent(0).maxOperations(3 * COLD_BLOCKS)
                    .duration(Duration.ofSeconds(60)).build().start();
            coldWrites.awaitBudget();
            coldWrites.finish();
            VersionedWorkload.Running coldReads = VersionedWorkload.builder(clients).writers(2)
                    .blocks(COLD_FIRST, COLD_BLOCKS).blockBytes(BLOCK).readPercent(100)
                    .duration(Duration.ofSeconds(120)).build().start();
            long hotStart = System.nanoTime();
            VersionedWorkload.Running run = VersionedWorkload.builder(clients).writers(4).blocks(FIRST, BLOCKS)
                    .blockBytes(BLOCK).readPercent(50).duration(Duration.ofSeconds(120)).build().start();
            History h = run.history();
            long slab = FIRST * BLOCK / SLAB;
            LabAdmin.await("history writes acknowledged on slab " + slab, Duration.ofSeconds(30),
                    () -> h.count(Kind.WRITE).get(Outcome.OK) >= 20 && replicas(admin, bridge, slab).size() == 2,
                    all);
            List<String> before = replicas(admin, bridge, slab);
            long generationBefore = generation(admin, bridge, slab);
            LabRbridge victim = memservers.stream().filter(m -> m.address().equals(before.getFirst())).findFirst()
                    .orElseThrow();

            lab.cut("bridge", victim.node());
            long cutAt = System.nanoTime();
            LabAdmin.await("the bridge marking " + victim.node() + " down", Duration.ofSeconds(10),
                    () -> admin.memserverState(bridge, victim).equals("down"), all);
            long okWhenDown = h.count(Kind.WRITE).get(Outcome.OK);
            // Degraded is too brief to poll for (a slab of 8 MiB rebuilds in about 0.1 s here): the slab's replicas
            // moving off the cut memserver, with the volume healthy, say it degraded and was rebuilt.
            LabAdmin.await("slab " + slab + " rebuilt without " + victim.node() + " and the volume healthy",
                    Duration.ofSeconds(40), () -> !replicas(admin, bridge, slab).contains(victim.address())
                            && admin.volumeState(bridge).equals("healthy"),
                    all);
            double rebuiltAfter = (System.nanoTime() - cutAt) / 1e9;
            List<String> rebuilt = replicas(admin, bridge, slab);
            assertTrue(!rebuilt.contains(victim.address()) && rebuilt.size() == 2,
                    "slab " + slab + " rebuilt on the two memservers left: " + rebuilt);
            assertTrue(generation(admin, bridge, slab) > generationBefore, "the survivor was re-tagged when "
                    + victim.node() + " failed: " + slab(admin, bridge, slab));
            // The cut lasts 10 s at least by design (the fault, not a wait for a condition).
            long left = cutAt + TimeUnit.SECONDS.toNanos(10) - System.nanoTime();
            if (left > 0) {
                TimeUnit.NANOSECONDS.sleep(left);
            }
            assertTrue(victim.isAlive() && bridge.isAlive(), "a partition is not a kill: both sides still run");
            long okBeforeHeal = h.count(Kind.WRITE).get(Outcome.OK);
            lab.heal("bridge", victim.node());
            long healAt = System.nanoTime();
            LabAdmin.await("the bridge seeing " + victim.node() + " again", Duration.ofSeconds(30),
                    () -> admin.memserverState(bridge, victim).equals("up"), all);
            LabAdmin.await("more history writes after the heal", Duration.ofSeconds(30),
                    () -> h.count(Kind.WRITE).get(Outcome.OK) >= okBeforeHeal + 20, all);
            LabAdmin.await("the volume healthy", Duration.ofSeconds(30),
                    () -> admin.volumeState(bridge).equals("healthy"), all);
            run.finish();
            coldReads.finish();

            RegisterChecker.Result result = RegisterChecker.check(h);
            // The cold blocks' writes and their reads are two histories of one register per block; only the first
            // writes (the second's writers write nothing), so versions stay unique.
            List<History.Operation> cold = new ArrayList<>(coldWrites.history().operations());
            cold.addAll(coldReads.history().operations());
            RegisterChecker.Result coldResult = RegisterChecker.check(cold, coldWrites.history()::describe);
            String story = String.format("%s cut at %.0f ms of the hot history, healed at %.0f ms; rebuilt after"
                    + " %.1f s on %s; %d writes acknowledged during the cut; %s%n%s%ncold blocks: %s; %s%n%s",
                    victim.node(), (cutAt - hotStart) / 1e6, (healAt - hotStart) / 1e6, rebuiltAfter, rebuilt,
                    okBeforeHeal - okWhenDown, run, result.report(10), coldWrites.history().summary(), coldReads,
                    coldResult.report(10));
            System.out.println("PartitionRebuildTest: " + story);
            assertTrue(result.ok(), story + "\n" + LabHistory.excerpt(h.operations(), result, h::describe, 3));
            assertTrue(coldResult.ok(), story + "\n" + LabHistory.excerpt(cold, coldResult,
                    coldWrites.history()::describe, 3));
            assertEquals(0, run.finalPassUnread() + coldWrites.finalPassUnread() + coldReads.finalPassUnread(),
                    "the final passes read every block: " + story);
            assertTrue(okBeforeHeal - okWhenDown >= 10, "the writes went on during the cut: " + story);
            assertEquals(0L, ((Number) admin.volume(bridge).get("lost")).longValue());
            for (Map<String, Object> s : admin.slabs(bridge, VOLUME)) {
                List<String> servers = ServeCluster.replicaServers(s);
                assertTrue(servers.size() == 2 && !servers.get(0).equals(servers.get(1)),
                        "a slab is not on two memservers: " + s);
            }

            // Converged: with the bridge stopped (its lease given back), each slab's replicas read straight from the
            // memservers are alike, byte for byte.
            bridge.terminate(Duration.ofSeconds(15));
            List<String> slabs = ReplicaCompare.run(lab, "client", admin.tokenFile(), VOLUME, memservers);
            System.out.println("PartitionRebuildTest: " + slabs);
            assertTrue(!slabs.isEmpty() && slabs.stream().allMatch(l -> l.endsWith(" same")
                    && l.split(" on ")[1].split(" ")[0].split(",").length == 2),
                    "every slab on two memservers, alike: " + slabs);
        }
    }

    /** The slab as the bridge's admin shows it (empty before its first write). */
    private static Map<String, Object> slab(LabAdmin admin, LabRbridge bridge, long slab) throws IOException {
        for (Map<String, Object> s : admin.slabs(bridge, VOLUME)) {
            if (((Number) s.get("slab")).longValue() == slab) {
                return s;
            }
        }
        return Map.of();
    }

    private static List<String> replicas(LabAdmin admin, LabRbridge bridge, long slab) throws IOException {
        return ServeCluster.replicaServers(slab(admin, bridge, slab));
    }

    private static long generation(LabAdmin admin, LabRbridge bridge, long slab) throws IOException {
        return ((Number) slab(admin, bridge, slab).get("generation")).longValue();
    }
}
