package dev.rbridge.rdma.ucx;

import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ProgressSpinTest {
    private static final long BUDGET = 20_000;

    @Test
    void neverPollsWithNothingOutstanding() {
        ProgressSpin spin = new ProgressSpin(BUDGET);
        assertFalse(spin.pollAgain(0, 0));
        assertFalse(spin.pollAgain(-1, 0), "a count gone below zero never polls");
        assertEquals(0, spin.spells());
    }

    @Test
    void pollsWithinTheBudgetThenSleeps() {
        ProgressSpin spin = new ProgressSpin(BUDGET);
        assertTrue(spin.pollAgain(1, 1_000));
        assertTrue(spin.pollAgain(1, 1_000 + BUDGET - 1));
        assertFalse(spin.pollAgain(1, 1_000 + BUDGET), "the budget ran out");
        assertEquals(1, spin.emptySpells());
    }

    @Test
    void workFoundEndsTheSpellAndTheNextOneHasAWholeBudget() {
        ProgressSpin spin = new ProgressSpin(BUDGET);
        assertTrue(spin.pollAgain(1, 0));
        assertTrue(spin.pollAgain(1, BUDGET - 1));
        spin.worked();
        assertTrue(spin.pollAgain(1, BUDGET * 10));
        assertTrue(spin.pollAgain(1, BUDGET * 11 - 1));
        assertEquals(2, spin.spells());
        assertEquals(0, spin.emptySpells());
    }

    @Test
    void eachEmptySpellMakesTwiceAsManyFollowingSpellsSleepAtOnceUpToTheCap() {
        ProgressSpin spin = new ProgressSpin(BUDGET);
        long now = 0;
        assertTrue(spin.pollAgain(1, now));
        for (int expected = 1; expected <= ProgressSpin.MAX_SKIP * 4; expected *= 2) {
            now += BUDGET;
            assertFalse(spin.pollAgain(1, now), "the spell's budget ran out");
            int skipped = 0;
            while (!spin.pollAgain(1, now)) { // the spells that sleep at once, then one that polls
                skipped++;
                assertTrue(skipped <= ProgressSpin.MAX_SKIP, "skips without bound");
            }
            assertEquals(Math.min(expected, ProgressSpin.MAX_SKIP), skipped);
        }
    }

    @Test
    void aSpellThatFindsWorkResetsTheBackoff() {
        ProgressSpin spin = new ProgressSpin(BUDGET);
        long now = 0;
        for (int i = 0; i < 5; i++) { // five empty spells: the next 16 idle spells would sleep at once
            while (!spin.pollAgain(1, now)) {
                now++;
            }
            now += BUDGET;
            assertFalse(spin.pollAgain(1, now));
        }
        int skipped = 0;
        while (!spin.pollAgain(1, now)) {
            skipped++;
        }
        assertEquals(16, skipped);
        spin.worked(); // this spell found work
        assertTrue(spin.pollAgain(1, now + 1), "no backoff after a spell that found work");
        now += BUDGET + 1;
        assertFalse(spin.pollAgain(1, now));
        assertFalse(spin.pollAgain(1, now), "one empty spell skips one");
        assertTrue(spin.pollAgain(1, now));
    }

    @Test
    void zeroBudgetNeverPolls() {
        ProgressSpin spin = new ProgressSpin(0);
        assertFalse(spin.pollAgain(8, 0));
        assertEquals(0, spin.spells());
    }

    @Test
    void theEnvironmentSetsTheBudgetInMicrosecondsAndBadValuesAreRefusedByName() {
        assertEquals(ProgressSpin.DEFAULT_BUDGET_NANOS, ProgressSpin.fromEnvironment(Map.of(), true).budgetNanos());
        assertEquals(0, ProgressSpin.fromEnvironment(Map.of(), false).budgetNanos(), "no polling on emulated RMA");
        assertEquals(0, ProgressSpin.fromEnvironment(Map.of("RBRIDGE_UCX_SPIN_US", "0"), true).budgetNanos());
        assertEquals(50_000, ProgressSpin.fromEnvironment(Map.of("RBRIDGE_UCX_SPIN_US", " 50 "), false)
                .budgetNanos());
        for (String bad : new String[]{"-1", "1001", "20us", "9999999999999999999"}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> ProgressSpin.fromEnvironment(Map.of("RBRIDGE_UCX_SPIN_US", bad), true));
            assertTrue(e.getMessage().contains("RBRIDGE_UCX_SPIN_US") && e.getMessage().contains(bad),
                    e.getMessage());
        }
    }
}
