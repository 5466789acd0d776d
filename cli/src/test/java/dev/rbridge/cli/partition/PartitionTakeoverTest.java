package dev.rbridge.cli.partition;

import dev.rbridge.cli.history.BlockVersion;
import dev.rbridge.cli.history.History;
import dev.rbridge.cli.history.History.Kind;
import dev.rbridge.cli.history.History.Outcome;
import dev.rbridge.cli.history.RegisterChecker;
import dev.rbridge.cli.history.VersionedWorkload;
import dev.rbridge.cli.history.WriteLoad;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A bridge cut from every memserver past its lease while another takes the volume over ({@link PartitionLab}): the
 * old owner keeps running, its clients keep writing, and when its cut heals whatever it still had to send reaches the
 * memservers. Fencing must keep all of it out of the new owner's volume.
 */
@Timeout(180)
@Tag("fault")
class PartitionTakeoverTest {
    private static final int BLOCK = 4096;
    private static final String VOLUME = "disk";
    private static final String SPEC = VOLUME + ",size=32M,replicas=2,slab=8M";
    /** 16 blocks across the boundary of slabs 0 and 1, written by both bridges' clients. */
    private static final long FIRST = 8L * 1024 * 1024 / BLOCK - 8;
    private static final long BLOCKS = 16;
    /** A's clients' writer ids start here; B's, a VersionedWorkload's, are 1 to 4. */
    private static final int A_FIRST_WRITER = 101;

    /**
     * A's memserver timeout: longer than the cut lasts, so A keeps its connections and what it had sent or queued
     * on them through the cut, and the heal delivers it (TCP retransmits) rather than A dropping it after 2 s.
     */
    private static final int A_TIMEOUT_SECONDS = 60;

    @BeforeAll
    static void available() {
        PartitionLab.assumeAvailable();
        PeerTool.check(30, "/usr/bin/python3", "-I", "-c", "import nbd");
    }

    private static String[] bridgeArgs(LabAdmin admin, int timeoutSeconds) {
        List<String> args = new ArrayList<>(List.of(admin.tokenArgs()));
        args.addAll(List.of("--insecure", "--timeout", String.valueOf(timeoutSeconds), "--lease", "2", "--volume",
                SPEC));
        return args.toArray(String[]::new);
    }

    /**
     * Bridge A (a 2 s lease, a 60 s memserver timeout) serves writes from four clients; it is cut from both
     * memservers (not from its clients, which keep writing into it) until its lease has lapsed on both; bridge B
     * starts over the same volume and its clients run the history workload; A's cut heals while they do, and what A
     * still had to send reaches the memservers. The history of B's clients, with A's writes
     * each allowed to land only before B's grant ({@link TakeoverHistory}), must be linearizable; A must fence.
     */
    @Test
    void aBridgeCutPastItsLeaseWhileAnotherTakesOverLandsNothingAfterTheGrant() throws Exception {
        try (PartitionLab lab = PartitionLab.create("m0", "m1", "a", "b", "client")) {
            LabAdmin admin = LabAdmin.create(lab);
            LabRbridge m0 = LabRbridge.memserver(lab, "m0", "256M", admin.tokenArgs());
            LabRbridge m1 = LabRbridge.memserver(lab, "m1", "256M", admin.tokenArgs());
            LabRbridge a = LabRbridge.bridge(lab, "a", List.of(m0, m1), bridgeArgs(admin, A_TIMEOUT_SECONDS));
            List<LabRbridge> all = new ArrayList<>(List.of(m0, m1, a));
            long seed = System.nanoTime();

            WriteLoad aClients = WriteLoad.start(LabHistory.connector(lab, "client", a.uri(VOLUME)), A_FIRST_WRITER,
                    4, FIRST, BLOCKS, BLOCK, seed);
            History aHistory = aClients.history();
            LabAdmin.await("A's clients writing and A's lease on both memservers", Duration.ofSeconds(30),
                    () -> aHistory.count(Kind.WRITE).get(Outcome.OK) >= 40 && admin.leaseHeld(m0, VOLUME)
                            && admin.leaseHeld(m1, VOLUME),
                    all.toArray(LabRbridge[]::new));

            lab.cut("a", "m0");
            lab.cut("a", "m1");
            long cutAt = System.nanoTime();
            LabAdmin.await("A's lease lapsing on both memservers", Duration.ofSeconds(30),
                    () -> !admin.leaseHeld(m0, VOLUME) && !admin.leaseHeld(m1, VOLUME), all.toArray(LabRbridge[]::new));
            long lapsedAfter = System.nanoTime() - cutAt;
            assertTrue(a.isAlive(), "a partition is not a kill: A still runs");

            LabRbridge b = LabRbridge.bridge(lab, "b", List.of(m0, m1), bridgeArgs(admin, 2));
            long grantedBy = System.nanoTime();
            all.add(b);
            LabRbridge[] logs = all.toArray(LabRbridge[]::new);
            VersionedWorkload.Running bClients = VersionedWorkload.builder(LabHistory.connector(lab, "client",
                    b.uri(VOLUME))).writers(4).blocks(FIRST, BLOCKS).blockBytes(BLOCK).readPercent(50)
                    .duration(Duration.ofSeconds(120)).seed(seed).build().start();
            LabAdmin.await("B's clients writing", Duration.ofSeconds(30),
                    () -> bClients.history().count(Kind.WRITE).get(Outcome.OK) >= 40, logs);

            lab.heal("a", "m0");
            lab.heal("a", "m1");
            long healedAt = System.nanoTime();
            boolean fenced = true;
            try {
                LabAdmin.await("A fencing the volume", Duration.ofSeconds(30),
                        () -> admin.volumeState(a).equals("fenced"), logs);
            } catch (AssertionError e) {
                fenced = false; // then A's clients' writes after the heal must have failed with EIO, below
            }
            long fencedAfter = System.nanoTime() - healedAt;
            // B's clients go on a few seconds past that (the fault's aftermath by design, not a wait for a condition).
            long okBefore = bClients.history().count(Kind.WRITE).get(Outcome.OK);
            TimeUnit.SECONDS.sleep(3);
            History bHistory = bClients.finish();
            assertTrue(aClients.stopAndJoin(30_000), "A's clients did not stop within 30 s");

            TakeoverHistory merged = new TakeoverHistory(aHistory, bHistory, grantedBy);
            RegisterChecker.Result result = merged.check();
            long bReadA = bHistory.operations().stream().filter(o -> !o.isWrite() && o.outcome() == Outcome.OK
                    && o.observed() instanceof BlockVersion.Content.Written w
                    && w.version().writer() >= A_FIRST_WRITER).count();
            long aEio = aHistory.operations().stream().filter(o -> o.invoked() > healedAt
                    && o.outcome() == Outcome.FAILED && o.note() != null && o.note().contains("EIO")).count();
            long aAckedAfterCut = aHistory.operations().stream().filter(o -> o.outcome() == Outcome.OK
                    && o.completed() > cutAt).count();
            long aAckedAfterGrant = aHistory.operations().stream().filter(o -> o.outcome() == Outcome.OK
                    && o.completed() > grantedBy).count();
            String story = String.format("A's lease lapsed %.1f s after the cut; A %s %.1f s after the heal; A's"
                    + " clients: %s, %d acknowledged after the cut (%d after B's grant), %d writes sent after"
                    + " the heal failed with EIO; B's clients: %s, %d reads returned A's versions%n%s",
                    lapsedAfter / 1e9, fenced ? "fenced" : "had not fenced", fencedAfter / 1e9, aHistory.summary(),
                    aAckedAfterCut, aAckedAfterGrant, aEio, bClients, bReadA, result.report(10))
                    + (a.log().contains("wrong access key") ? "\nA's late WRITE was refused: wrong access key" : "");
            System.out.println("PartitionTakeoverTest: " + story);

            assertTrue(merged.fencingViolations().isEmpty(), "A's writes landed after B's grant:\n"
                    + String.join("\n", merged.fencingViolations()) + "\n" + story);
            assertTrue(result.ok(), story + "\n" + LabHistory.excerpt(merged.operations(), result,
                    aHistory::describe, 3));
            assertEquals(0, bClients.finalPassUnread(), "B's final pass read every block: " + story);
            assertTrue(bHistory.count(Kind.WRITE).get(Outcome.OK) - okBefore >= 10,
                    "B's clients went on writing after the heal: " + story);
            assertTrue(fenced || aEio > 0, "A neither shows the volume fenced nor fails its clients' writes with EIO"
                    + " after the heal: " + story + "\n" + a.tails());

            // Nothing of A's landed on a replica that B's reads did not see either: once B has resynchronized what it
            // took over and both bridges have stopped, each slab's replicas, read straight from the memservers, are
            // alike byte for byte.
            LabAdmin.await("B resynchronizing the volume", Duration.ofSeconds(60), () -> {
                Map<String, Object> volume = admin.volume(b);
                Map<?, ?> rebuild = (Map<?, ?>) admin.get(b, "/rebuild");
                return "healthy".equals(volume.get("state")) && ((Number) volume.get("rebuilding")).intValue() == 0
                        && ((Number) rebuild.get("queued")).intValue() == 0 && rebuild.get("slab") == null;
            }, logs);
            b.terminate(Duration.ofSeconds(15));
            a.terminate(Duration.ofSeconds(15));
            LabAdmin.await("no lease left on the volume", Duration.ofSeconds(30),
                    () -> !admin.leaseHeld(m0, VOLUME) && !admin.leaseHeld(m1, VOLUME), logs);
            List<String> slabs = ReplicaCompare.run(lab, "client", admin.tokenFile(), VOLUME, List.of(m0, m1));
            System.out.println("PartitionTakeoverTest: " + slabs);
            assertTrue(!slabs.isEmpty() && slabs.stream().allMatch(l -> l.endsWith(" same")
                    && l.split(" on ")[1].split(" ")[0].split(",").length == 2),
                    "every slab on both memservers, alike: " + slabs);
        }
    }
}
