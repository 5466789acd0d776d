package dev.rbridge.cli.history;

import dev.rbridge.cli.history.History.Kind;
import dev.rbridge.cli.history.History.Outcome;
import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.IOException;
import java.time.Duration;
import java.util.HashSet;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The history workload through a real NBD client (libnbd, {@link LibnbdTarget}) against {@code rbridge serve} in front
 * of two memserver processes, with no fault: four writers for 10 s on 16 blocks across a slab boundary (so writes
 * to one block often overlap), then every block read back; once on a volume with one replica, once with two. The
 * history must be linearizable, every request acknowledged, every block read at the end and every writer's data
 * read back. This is the baseline the fault tests run the same workload against.
 */
@Timeout(120)
@Tag("interop")
class VersionedWorkloadInteropTest {
    /** Block 1024 is the first of the second 4 MiB slab. */
    private static final long FIRST_BLOCK = 1016;
    private static final long BLOCKS = 16;

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    static ServeCluster cluster;

    @BeforeAll
    static void start() throws IOException {
        PeerTool.check(30, "/usr/bin/python3", "-I", "-c", "import nbd");
        cluster = LOGS.watch(ServeCluster.builder("history").memservers(2).capacity("256M")
                .volume("r1,size=16M,replicas=1,slab=4M")
                .volume("r2,size=16M,replicas=2,slab=4M")
                .start());
    }

    @AfterAll
    static void stop() {
        if (cluster != null) {
            cluster.close();
        }
    }

    @Test
    void oneReplicaLeavesALinearizableHistory() throws InterruptedException {
        assertLinearizable("r1");
    }

    /**
     * As with one replica, on a volume with two: overlapping writes to one block from two connections must leave both
     * replicas alike, or reads flip between the two values once both writes are acknowledged.
     */
    @Test
    void twoReplicasLeaveALinearizableHistory() throws InterruptedException {
        assertLinearizable("r2");
    }

    private static void assertLinearizable(String volume) throws InterruptedException {
        VersionedWorkload.Running run = VersionedWorkload.builder(LibnbdTarget.connector(cluster.uri(volume)))
                .writers(4).blocks(FIRST_BLOCK, BLOCKS).readPercent(50).duration(Duration.ofSeconds(10)).build()
                .start();
        run.awaitBudget();
        History h = run.finish();
        RegisterChecker.Result result = RegisterChecker.check(h);
        System.out.println(volume + ": " + run + "\n" + result.report(5));

        assertTrue(result.ok(), result + "\n" + run);
        assertEquals(0, run.finalPassUnread(), run.toString());
        assertEquals(0, h.count(Kind.WRITE).get(Outcome.FAILED) + h.count(Kind.WRITE).get(Outcome.UNKNOWN)
                + h.count(Kind.READ).get(Outcome.FAILED) + h.count(Kind.READ).get(Outcome.UNKNOWN),
                "every request is acknowledged: " + run);
        Set<Integer> writersSeen = new HashSet<>();
        for (History.Operation o : h.operations()) {
            if (o.observed() instanceof BlockVersion.Content.Written w) {
                writersSeen.add(w.version().writer());
            }
        }
        assertEquals(Set.of(1, 2, 3, 4), writersSeen, "every writer's blocks are read back: " + run);
        assertTrue(h.count(Kind.WRITE).get(Outcome.OK) >= 400, "too few writes to mean much: " + run);
    }
}
