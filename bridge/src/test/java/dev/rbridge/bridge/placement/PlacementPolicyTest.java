package dev.rbridge.bridge.placement;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

class PlacementPolicyTest {
    private record Server(String name, long freeBytes, boolean up, boolean draining, String failureDomain)
            implements PlacementCandidate {
    }

    private static Server server(String name, long free) {
        return new Server(name, free, true, false, null);
    }

    @Test
    void choosesOnlyMemserversThatAreUpNotDrainingNotExcludedAndHaveRoom() {
        Server ok = server("ok", 100);
        List<Server> all = List.of(new Server("down", 1000, false, false, null),
                new Server("draining", 1000, true, true, null), server("full", 99), server("excluded", 1000), ok);
        Random r = new Random(1);
        for (int i = 0; i < 50; i++) {
            assertSame(ok, PlacementPolicy.choose(all, Set.of(all.get(3)), List.of(), 100, r));
        }
        assertNull(PlacementPolicy.choose(all, Set.of(all.get(3), ok), List.of(), 100, r));
    }

    @Test
    void ofTwoDrawnTheOneWithMoreRoomWins() {
        List<Server> all = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            all.add(server("s" + i, 1000 + i));
        }
        Random r = new Random(7);
        int[] wins = new int[10];
        int rounds = 20_000;
        for (int i = 0; i < rounds; i++) {
            wins[all.indexOf(PlacementPolicy.choose(all, Set.of(), List.of(), 1, r))]++;
        }
        // All qualify, so the first draw decides: the k-th smallest wins when drawn with a smaller one, 2k / (10 x 9).
        for (int k = 0; k < 10; k++) {
            assertEquals(rounds * 2.0 * k / 90, wins[k], rounds * 0.01, "wins " + java.util.Arrays.toString(wins));
        }
    }

    @Test
    void amongManyThatDoNotQualifyEachQualifyingOneWinsAsOftenAsTwoChoicesSay() {
        List<Server> all = new ArrayList<>();
        for (int i = 0; i < 40; i++) {
            all.add(i % 10 == 0 ? server("s" + i, 1000 + i) : new Server("down" + i, 5000, false, false, null));
        }
        Random r = new Random(11);
        int[] wins = new int[4];
        int rounds = 24_000;
        for (int i = 0; i < rounds; i++) {
            wins[all.indexOf(PlacementPolicy.choose(all, Set.of(), List.of(), 1, r)) / 10]++;
        }
        // Few pairs drawn from all qualify, so the list of those that do decides mostly. Four qualify; the k-th
        // smallest (k = 0..3) wins when drawn with a smaller one: 2k / (4 x 3) of the pairs.
        for (int k = 0; k < 4; k++) {
            assertEquals(rounds * 2.0 * k / 12, wins[k], rounds * 0.02, "wins " + java.util.Arrays.toString(wins));
        }
    }

    @Test
    void withDomainsAReplicaGoesToARackTheSlabIsNotInWhileThereIsOne() {
        Server a1 = new Server("a1", 1000, true, false, "a");
        Server a2 = new Server("a2", 5000, true, false, "a");
        Server b1 = new Server("b1", 100, true, false, "b");
        List<Server> all = List.of(a1, a2, b1);
        Random r = new Random(3);
        for (int i = 0; i < 50; i++) {
            assertSame(b1, PlacementPolicy.choose(all, Set.of(a1), List.of(a1), 100, r));
        }
        // every rack holds one already: any other memserver rather than none
        assertSame(a2, PlacementPolicy.choose(all, Set.of(a1, b1), List.of(a1, b1), 100, r));
    }

    @Test
    void withoutDomainsTheHoldersRacksPlayNoPart() {
        Server a1 = server("a1", 1000);
        Server a2 = server("a2", 5000);
        Server b1 = server("b1", 100);
        List<Server> all = List.of(a1, a2, b1);
        Random r = new Random(3);
        int a2Chosen = 0;
        for (int i = 0; i < 50; i++) {
            Server s = PlacementPolicy.choose(all, Set.of(a1), List.of(a1), 100, r);
            assertNotEquals(a1, s);
            a2Chosen += s == a2 ? 1 : 0;
        }
        assertEquals(50, a2Chosen, "of a2 and b1, a2 has more room");
    }
}
