package dev.rbridge.cli.faults;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.Callable;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Fencing against a bridge paused in the middle of its writes. Bridge A ({@code rbridge serve}, R=2, a 2 s lease)
 * takes 1 MiB writes from 32 NBD connections at once, so writes to both memservers are always under way; at a random
 * moment it is SIGSTOPped, and kept stopped until its lease has lapsed on every memserver. Bridge B, a second
 * {@code rbridge serve} over the same memservers and volume, takes the volume over, writes every block with its own
 * pattern and finishes resynchronizing; then A gets SIGCONT, and whatever A had half sent arrives. A must fence (the
 * volume shows {@code fenced} and a new write through it fails with EIO), and with both bridges stopped every replica
 * of every slab, read straight from each memserver, must be byte for byte B's data. Twenty rounds, each with its own
 * pause point, over the same memservers and volume.
 *
 * <p>A stays stopped for longer than its lease but shorter than its memserver timeout (20 s), the worst case: on
 * waking it still trusts its connections and finishes sending the writes it had begun, rather than dropping them.
 * 32 writes in flight (a common queue depth) keep A's connections to the memservers fuller than the kernel's socket
 * buffers, so a pause usually catches a WRITE whose header the memserver has taken in and whose data A still holds;
 * with 8 in flight the whole of a 1 MiB write was mostly in the kernel already, and a round caught one about once in
 * twenty.
 *
 * <p>The pause points come from a seed, printed at the start; {@code -Drbridge.test.pauseSeed=N} repeats a run, and
 * {@code -Drbridge.test.pauseRounds=N} changes the number of rounds (20).
 */
@Timeout(900)
@Tag("fault")
class PauseTakeoverTest {
    private static final String VOLUME = "disk";
    private static final long MiB = 1 << 20;
    private static final long SIZE = 64 * MiB;
    private static final long SLAB = 8 * MiB;
    private static final int REPLICAS = 2;
    private static final String SPEC = VOLUME + ",size=" + SIZE + ",replicas=" + REPLICAS + ",slab=" + SLAB;
    private static final String LEASE_SECONDS = "2";
    private static final String TIMEOUT_SECONDS = "20";
    private static final int BLOCKS = (int) (SIZE / BlockPattern.BLOCK);
    /** Writes in flight through A: one per connection. */
    private static final int WRITERS = 32;
    /** The pause comes this long at most after A's writers are under way: a few passes over the volume. */
    private static final int PAUSE_WINDOW_MS = 800;
    private static final Duration WAIT = Duration.ofSeconds(60);

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    @Test
    void aBridgePausedMidWriteTakenOverAndResumedFencesAndLeavesEveryReplicaTheNewOwners() throws Exception {
        long seed = Long.getLong("rbridge.test.pauseSeed", new Random().nextLong());
        int rounds = Integer.getInteger("rbridge.test.pauseRounds", 20);
        System.out.println("PauseTakeoverTest: seed " + seed + " (-Drbridge.test.pauseSeed=" + seed + "), " + rounds
                + " rounds");
        Random random = new Random(seed);
        List<String> failed = new ArrayList<>();
        long started = System.nanoTime();
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("pause-takeover").memservers(2).capacity("512M")
                .memserverAdmin(true).timeout(TIMEOUT_SECONDS).bridgeArgs("--lease", LEASE_SECONDS).volume(SPEC)
                .start())) {
            for (int round = 1; round <= rounds; round++) {
                if (round > 1) {
                    c.startBridge(); // A again: B gave the volume back when it stopped
                }
                List<String> problems = round(c, round, random.nextInt(PAUSE_WINDOW_MS));
                if (!problems.isEmpty()) {
                    failed.add("round " + round + ":\n  " + String.join("\n  ", problems));
                }
            }
        }
        String summary = failed.size() + " of " + rounds + " rounds failed (seed " + seed + ", "
                + Duration.ofNanos(System.nanoTime() - started).toSeconds() + " s)";
        System.out.println("PauseTakeoverTest: " + summary);
        assertTrue(failed.isEmpty(), summary + ":\n" + String.join("\n", failed));
    }

    /** One round; returns what went wrong with the fencing or the data (nothing: the round passed). */
    private List<String> round(ServeCluster c, int round, int pauseAfterMs) throws Exception {
        List<String> problems = new ArrayList<>();
        BlockPattern a = new BlockPattern('A', round);
        BlockPattern b = new BlockPattern('B', round);
        StringBuilder story = new StringBuilder("round " + round + ":");

        BlockWriters aWriters = BlockWriters.start(c.uri(VOLUME), a, BLOCKS, WRITERS, true, WAIT);
        TakeoverBridge bridgeB = null;
        try {
            aWriters.awaitAcked(WRITERS, WAIT);
            assertTrue(leaseHeldEverywhere(c), "A holds the volume's lease on every memserver before the pause");
            Thread.sleep(pauseAfterMs); // the random pause point, not a wait for a condition
            c.bridge().freeze();
            long frozenAt = System.nanoTime();
            long ackedBefore = aWriters.acked();
            aWriters.stop(); // each writer ends once the write it waits for is answered, after the SIGCONT
            try {
                awaitLeaseLapsed(c);
                long lapsedAfter = System.nanoTime() - frozenAt;
                bridgeB = TakeoverBridge.start(c, "bridge-b." + round, List.of("--timeout", TIMEOUT_SECONDS,
                        "--lease", LEASE_SECONDS, "--volume", SPEC), WAIT);
                try (BlockWriters bWriters = BlockWriters.start(bridgeB.uri(VOLUME), b, BLOCKS, WRITERS, false, WAIT)) {
                    assertTrue(bWriters.join(WAIT), "B's writes did not finish: " + bWriters.describe());
                    assertEquals(BLOCKS, bWriters.acked(), "every write through B succeeds: " + bWriters.describe()
                            + "\n" + bridgeB.log());
                }
                awaitResynchronized(bridgeB);
                story.append(String.format(" A paused %d ms into its writes (%d acknowledged), its lease lapsed after"
                        + " %.1f s; B wrote all %d blocks;", pauseAfterMs, ackedBefore, lapsedAfter / 1e9, BLOCKS));
            } finally {
                c.bridge().thaw();
            }
            long pausedNanos = System.nanoTime() - frozenAt;
            story.append(String.format(" A resumed after %.1f s%s;", pausedNanos / 1e9,
                    pausedNanos >= Duration.ofSeconds(Long.parseLong(TIMEOUT_SECONDS)).toNanos()
                            ? " (past its timeout: it may drop its connections rather than finish its writes)"
                            : ""));

            long resumedAt = System.nanoTime();
            if (poll(Duration.ofSeconds(30), () -> "fenced".equals(c.volume(VOLUME).get("state")))) {
                story.append(String.format(" fenced %.1f s later;", (System.nanoTime() - resumedAt) / 1e9));
            } else {
                problems.add("A did not fence within 30 s of SIGCONT: " + c.volume(VOLUME));
            }
            // What A had begun is answered (its memserver operations done or failed) before the replicas are read.
            if (!poll(Duration.ofSeconds(30), () -> c.memserverStatus().stream()
                    .allMatch(m -> ((Number) m.get("in_flight")).longValue() == 0))) {
                problems.add("A still has memserver operations in flight 30 s after SIGCONT: " + c.memserverStatus());
            }
            if (!aWriters.join(WAIT)) {
                problems.add("A's clients got no answer within " + WAIT + " of SIGCONT: " + aWriters.describe());
            }
            story.append(" A's clients after SIGCONT: ").append(aWriters.acked() - ackedBefore)
                    .append(" more acknowledged, errors ").append(aWriters.errors()).append(", connection failures ")
                    .append(aWriters.failures().size()).append(';');
            try (NbdWriteConnection probe = NbdWriteConnection.open(c.uri(VOLUME), WAIT)) {
                int error = probe.write(0, a.block(0));
                if (error != NbdWriteConnection.EIO) {
                    problems.add("a write through A after it lost the volume was answered with error " + error
                            + ", not EIO");
                }
            }

            assertEquals(0, bridgeB.stop(WAIT), "B stops cleanly (SIGTERM), giving its lease back:\n" + bridgeB.log());
            assertEquals(0, c.stopBridge(), "A stops cleanly");
        } finally {
            aWriters.close();
            if (bridgeB != null) {
                bridgeB.close();
            }
        }
        // Every connection of A and B is gone from the memservers: whatever A sent has been taken in.
        assertTrue(poll(WAIT, () -> c.memservers().stream().allMatch(m -> ((List<?>) memserverAdmin(m, "/clients"))
                .isEmpty())), "the bridges' connections did not end on the memservers");

        List<ReplicaScan.Finding> findings = ReplicaScan.scan(c.memservers().stream()
                .map(ServeCluster.Memserver::address).toList(), "", VOLUME, SIZE, SLAB, REPLICAS, b);
        for (ReplicaScan.Finding f : findings.subList(0, Math.min(findings.size(), 20))) {
            problems.add("found at " + f);
        }
        if (findings.size() > 20) {
            problems.add("... " + (findings.size() - 20) + " more differences");
        }
        story.append(findings.isEmpty() ? " every replica holds B's data"
                : " " + findings.size()
                        + " difference(s) from B's data");
        System.out.println(story + (problems.isEmpty() ? "" : "\n  " + String.join("\n  ", problems)));
        return problems;
    }

    /** Waits until no memserver has a live lease on the volume: A's has lapsed, so B may take the volume over. */
    private void awaitLeaseLapsed(ServeCluster c) throws Exception {
        assertTrue(poll(Duration.ofSeconds(30), () -> c.memservers().stream().noneMatch(m -> leaseHeld(m))),
                "the frozen bridge's lease did not lapse");
    }

    private boolean leaseHeldEverywhere(ServeCluster c) {
        return c.memservers().stream().allMatch(this::leaseHeld);
    }

    /** Whether the memserver's /leases shows a live lease on the volume. */
    private boolean leaseHeld(ServeCluster.Memserver m) {
        for (Object lease : (List<?>) memserverAdmin(m, "/leases")) {
            Map<?, ?> l = (Map<?, ?>) lease;
            if (VOLUME.equals(l.get("volume")) && "held".equals(l.get("state"))) {
                return true;
            }
        }
        return false;
    }

    /** Waits until B has resynchronized what it took over: the volume healthy, nothing rebuilding or queued. */
    private static void awaitResynchronized(TakeoverBridge b) throws Exception {
        assertTrue(poll(WAIT, () -> {
            Map<?, ?> rebuild = (Map<?, ?>) b.admin("/rebuild");
            Map<?, ?> volume = (Map<?, ?>) ((List<?>) b.admin("/volumes")).getFirst();
            return "healthy".equals(volume.get("state")) && ((Number) volume.get("rebuilding")).intValue() == 0
                    && ((Number) rebuild.get("queued")).intValue() == 0 && rebuild.get("slab") == null;
        }), "B did not finish resynchronizing the volume it took over:\n" + b.log());
    }

    /** GET {@code path} on a memserver's admin interface, parsed. */
    private Object memserverAdmin(ServeCluster.Memserver m, String path) {
        HttpResponse<String> r;
        try {
            r = http.send(HttpRequest.newBuilder(URI.create("http://" + m.adminAddress() + path))
                    .timeout(Duration.ofSeconds(10)).GET().build(), HttpResponse.BodyHandlers.ofString());
        } catch (IOException e) {
            throw new UncheckedIOException("GET " + path + " on memserver " + m.index(), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
        if (r.statusCode() != 200) {
            throw new IllegalStateException("GET " + path + " on memserver " + m.index() + ": HTTP " + r.statusCode()
                    + ": " + r.body());
        }
        return ServeCluster.Json.parse(r.body());
    }

    /** Polls {@code check} every 50 ms until it holds (true) or {@code timeout} has passed (false). */
    private static boolean poll(Duration timeout, Callable<Boolean> check) throws Exception {
        long deadline = System.nanoTime() + timeout.toNanos();
        Exception last = null;
        while (System.nanoTime() < deadline) {
            try {
                if (check.call()) {
                    return true;
                }
            } catch (RuntimeException e) {
                last = e;
            }
            Thread.sleep(50);
        }
        if (last != null) {
            System.out.println("PauseTakeoverTest: the last check failed with " + last);
        }
        return false;
    }
}
