package dev.rbridge.sim;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Small clusters (60 memservers of 1 GiB, slabs of 64 MiB, racks of 10) where the answer is known. */
class RunTest {
    private static Scenario small(String... more) {
        List<String> args = new ArrayList<>(List.of("--servers", "60", "--bridges", "6", "--capacity-gib", "1",
                "--slab-mib", "64", "--rack-size", "10", "--fill", "0.5", "--years", "2", "--server-rate", "0",
                "--rack-rate", "0", "--bridge-rate", "0"));
        args.addAll(List.of(more));
        return Scenario.parse(args.toArray(String[]::new));
    }

    @Test
    void withoutFailuresNothingIsLostOrRebuilt() {
        Outcome o = Run.simulate(small(), new Replication(2), Scenario.Placing.ANY);
        assertEquals(0, o.serverFailures() + o.rackFailures() + o.bridgeFailures());
        assertEquals(0, o.groupsLost());
        assertEquals(0, o.copies());
        assertEquals(60 * 16 / 2 / 2, o.groups()); // half of 60 x 16 slabs of room, two pieces a group
    }

    @Test
    void withOneReplicaEveryFailureLosesData() {
        Outcome o = Run.simulate(small("--server-rate", "5"), new Replication(1), Scenario.Placing.ANY);
        assertTrue(o.serverFailures() > 100, "failures: " + o.serverFailures());
        // A memserver back empty may fail again before it holds anything: every failure with pieces on it loses data.
        assertEquals(o.serverRestore().count(), o.lossEvents());
        assertTrue(o.lossEvents() > o.serverFailures() * 9 / 10, o.lossEvents() + " of " + o.serverFailures());
        assertEquals(0, o.copies());
    }

    @Test
    void withTwoReplicasIndependentFailuresAreRebuiltInTime() {
        Outcome o = Run.simulate(small("--server-rate", "5"), new Replication(2), Scenario.Placing.ANY);
        assertTrue(o.serverFailures() > 100, "failures: " + o.serverFailures());
        assertEquals(0, o.groupsLost());
        assertTrue(o.copies() > 0);
        // Each failure costs the detection plus copies spread over the bridges, far less than copying the memserver's
        // 8 slabs one after another would (8 x 64 MiB at 1 GB/s: 0.54 s).
        assertTrue(o.serverRestore().min() >= 6, o.serverRestore().toString());
        assertTrue(o.serverRestore().median() < 6 + 0.54, o.serverRestore().toString());
    }

    @Test
    void rackFailuresLoseNothingWithTwoReplicasOnDistinctRacksAndDataWithout() {
        Scenario s = small("--rack-rate", "20", "--replace-h", "0.01");
        Outcome racks = Run.simulate(s, new Replication(2), Scenario.Placing.RACKS);
        Outcome any = Run.simulate(s, new Replication(2), Scenario.Placing.ANY);
        assertTrue(racks.rackFailures() > 50, "rack failures: " + racks.rackFailures());
        assertEquals(0, racks.groupsLost());
        assertTrue(any.groupsLost() > 0, "placed anywhere, some slab has both replicas in a rack that failed");
    }

    @Test
    void erasureCodingLosesAStripeOnlyWhenMoreThanItsParityIsMissing() {
        Scenario s = small("--rack-rate", "20", "--replace-h", "0.01");
        Outcome racks = Run.simulate(s, new ErasureCoding(4, 2), Scenario.Placing.RACKS);
        assertEquals(0, racks.groupsLost(), "six racks, one split on each: a rack takes one split");
        Outcome any = Run.simulate(s, new ErasureCoding(4, 2), Scenario.Placing.ANY);
        assertTrue(any.groupsLost() > 0, "a rack of 10 of 60 holds 3 of 6 splits of some stripe");
        assertEquals(any.groupsLost() * 4L * (64 << 20), any.bytesLost());
    }

    @Test
    void theSameSeedGivesTheSameOutcomeAndTheSameFailuresInEveryRow() {
        String[] busy = {"--server-rate", "5", "--rack-rate", "5", "--bridge-rate", "5"};
        Outcome a = Run.simulate(small(busy), new Replication(2), Scenario.Placing.ANY);
        Outcome b = Run.simulate(small(busy), new Replication(2), Scenario.Placing.ANY);
        assertEquals(a, b);
        List<String> other = new ArrayList<>(List.of(busy));
        other.addAll(List.of("--seed", "2"));
        assertNotEquals(a, Run.simulate(small(other.toArray(String[]::new)), new Replication(2),
                Scenario.Placing.ANY));
        // Failures draw from a stream of their own: every row of a table sees the same ones.
        Outcome ec = Run.simulate(small(busy), new ErasureCoding(4, 2), Scenario.Placing.RACKS);
        assertEquals(List.of(a.serverFailures(), a.rackFailures(), a.bridgeFailures()),
                List.of(ec.serverFailures(), ec.rackFailures(), ec.bridgeFailures()));
    }
}
