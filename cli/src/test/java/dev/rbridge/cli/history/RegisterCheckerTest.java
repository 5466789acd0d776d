package dev.rbridge.cli.history;

import dev.rbridge.cli.history.BlockVersion.Content;
import dev.rbridge.cli.history.History.Outcome;
import dev.rbridge.cli.history.RegisterChecker.Kind;
import dev.rbridge.cli.history.RegisterChecker.Result;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The checker against hand-made histories (times are plain numbers): each kind of violation must be rejected and
 * named, each legal concurrent history accepted; then random legal histories from a simulated atomic register, all
 * accepted, each with one read made provably stale, all rejected.
 */
class RegisterCheckerTest {
    private static final long B = 7;
    private static final BlockVersion V1 = new BlockVersion(1, 1);
    private static final BlockVersion V2 = new BlockVersion(2, 1);
    private static final BlockVersion V3 = new BlockVersion(1, 2);

    private final History h = History.handMade();

    private void assertAccepted() {
        Result r = RegisterChecker.check(h);
        assertTrue(r.ok(), r.toString());
    }

    private Result assertRejected(Kind kind) {
        Result r = RegisterChecker.check(h);
        assertFalse(r.ok(), "accepted: " + h.operations());
        assertTrue(r.violations().stream().anyMatch(v -> v.kind() == kind && v.block() == B),
                "expected " + kind + ", got " + r);
        return r;
    }

    private void readInitial(long from, long to) {
        h.read(B, BlockVersion.INITIAL, from, to, Outcome.OK);
    }

    // ---- violations

    @Test
    void aStaleReadIsRejected() {
        h.write(B, V1, 0, 10);
        h.write(B, V2, 20, 30);
        h.read(B, V1, 40, 50);
        h.write(B, V3, 45, 60); // still in flight when the read began: stale, not lost
        Result r = assertRejected(Kind.STALE_READ);
        assertEquals(1, r.violations().size(), r.toString());
        String line = r.violations().getFirst().line();
        assertTrue(line.startsWith("block 7 STALE_READ: read#2 block 7 saw w1:1 [40..50 ok] returned w1:1"), line);
        assertTrue(line.contains("write#1 block 7 w2:1"), line);
    }

    @Test
    void aFinalReadOfAnOlderValueIsALostWrite() {
        h.write(B, V1, 0, 10);
        h.write(B, V2, 20, 30);
        h.read(B, V1, 40, 50);
        assertRejected(Kind.LOST_WRITE);
    }

    @Test
    void aFinalReadOfZerosAfterAcknowledgedWritesIsALostWrite() {
        h.write(B, V1, 0, 10);
        h.write(B, V2, 5, 30);
        readInitial(40, 50);
        Result r = assertRejected(Kind.LOST_WRITE);
        assertEquals(2, r.violations().size(), "both writes were lost: " + r);
    }

    @Test
    void anOverwrittenValueComingBackIsAResurrection() {
        h.write(B, V1, 0, 10);
        h.write(B, V2, 20, 30);
        h.read(B, V2, 40, 50);
        h.read(B, V1, 60, 70);
        assertRejected(Kind.RESURRECTION);
    }

    @Test
    void zerosComingBackAfterAValueWasReadIsAResurrection() {
        h.write(B, V1, 0, 10);
        h.read(B, V1, 20, 30);
        readInitial(40, 50);
        Result r = RegisterChecker.check(h);
        assertFalse(r.ok(), r.toString());
    }

    @Test
    void aNewOldInversionDuringOneLongWriteIsRejected() {
        h.write(B, V1, 0, 10);
        h.write(B, V2, 20, 100);
        h.read(B, V2, 30, 40); // the new value, while the write runs
        h.read(B, V1, 50, 60); // then the old one again: the write cannot take effect twice
        assertRejected(Kind.NEW_OLD_INVERSION);
    }

    @Test
    void aNewOldInversionFromZerosDuringTheFirstWriteIsRejected() {
        h.write(B, V1, 0, 100);
        h.read(B, V1, 10, 20);
        readInitial(30, 40);
        assertRejected(Kind.NEW_OLD_INVERSION);
    }

    @Test
    void aValueNeverWrittenIsRejected() {
        h.write(B, V1, 0, 10);
        h.read(B, V2, 20, 30);
        assertRejected(Kind.UNWRITTEN);
    }

    @Test
    void aValueWrittenOnlyAfterTheReadCompletedIsRejected() {
        h.read(B, V1, 0, 10);
        h.write(B, V1, 20, 30);
        assertRejected(Kind.READ_BEFORE_WRITE);
    }

    @Test
    void aValueOfAnUnknownWriteSeenBeforeItsInvocationIsRejected() {
        h.read(B, V1, 0, 10);
        h.write(B, V1, 20, 0, Outcome.UNKNOWN);
        assertRejected(Kind.READ_BEFORE_WRITE);
    }

    @Test
    void aCorruptBlockIsRejectedWithItsOffset() {
        h.write(B, V1, 0, 10);
        h.read(B, new Content.Corrupt(2048, "torn"), 20, 30, Outcome.OK);
        Result r = assertRejected(Kind.CORRUPT);
        assertTrue(r.violations().getFirst().line().contains("byte 2048"), r.toString());
    }

    @Test
    void aVersionOfAnotherBlockIsRejected() {
        h.write(B, V1, 0, 10);
        h.write(B + 1, V2, 0, 10);
        h.read(B, new Content.Written(V2, B + 1), 20, 30, Outcome.OK);
        assertRejected(Kind.FOREIGN);
    }

    @Test
    void twoWritesOfOneValueAreTheWorkloadsBug() {
        h.write(B, V1, 0, 10);
        h.write(B, V1, 20, 30);
        assertThrows(IllegalArgumentException.class, () -> RegisterChecker.check(h));
    }

    @Test
    void theReportIsCappedAndNamesEveryBlock() {
        for (long b = 0; b < 50; b++) {
            h.write(b, V1, 0, 10);
            h.read(b, BlockVersion.INITIAL, 20, 30, Outcome.OK);
        }
        Result r = RegisterChecker.check(h);
        assertEquals(50, r.violations().size());
        String report = r.report(5);
        assertEquals(7, report.lines().count(), report);
        assertTrue(report.startsWith("100 operations on 50 blocks: 50 violations in 50 blocks"), report);
        assertTrue(report.endsWith("... and 45 more"), report);
    }

    // ---- legal histories

    @Test
    void aReadConcurrentWithAWriteMayReturnTheOldOrTheNewValue() {
        h.write(B, V1, 0, 10);
        h.write(B, V2, 20, 50);
        h.read(B, V1, 30, 40);
        h.read(B, V2, 35, 45);
        h.read(B, V2, 60, 70);
        assertAccepted();
    }

    @Test
    void twoOverlappingReadsDuringAWriteMaySeeNewThenOld() {
        h.write(B, V1, 0, 10);
        h.write(B, V2, 20, 100);
        h.read(B, V2, 30, 60);
        h.read(B, V1, 40, 70); // overlaps the first read: linearized before the write, the first one after
        h.read(B, V2, 110, 120);
        assertAccepted();
    }

    @Test
    void overlappingWritesTakeEffectInEitherOrder() {
        h.write(B, V1, 0, 50);
        h.write(B, V2, 10, 60);
        h.read(B, V2, 20, 30);
        h.read(B, V1, 35, 45); // V2 then V1
        h.read(B, V1, 70, 80);
        assertAccepted();

        History other = History.handMade();
        other.write(B, V1, 0, 50);
        other.write(B, V2, 10, 60);
        other.read(B, V1, 20, 30);
        other.read(B, V2, 35, 45); // V1 then V2
        other.read(B, V2, 70, 80);
        assertTrue(RegisterChecker.check(other).ok(), RegisterChecker.check(other).toString());
    }

    @Test
    void afterOverlappingWritesTheOrderSeenMustHold() {
        h.write(B, V1, 0, 50);
        h.write(B, V2, 10, 60);
        h.read(B, V2, 20, 30);
        h.read(B, V1, 35, 45); // V2 then V1 ...
        h.read(B, V2, 70, 80); // ... then V2 again
        assertRejected(Kind.NEW_OLD_INVERSION);
    }

    @Test
    void anUnknownWriteMayTakeEffectLateOrNever() {
        h.write(B, V1, 0, 10);
        h.write(B, V2, 20, 0, Outcome.UNKNOWN);
        h.write(B + 1, V3, 20, 25, Outcome.FAILED); // never seen
        h.read(B, V1, 100, 110);
        h.read(B, V2, 200, 210);
        h.read(B, V2, 300, 310);
        h.read(B + 1, BlockVersion.INITIAL, 300, 310, Outcome.OK);
        assertAccepted();
    }

    @Test
    void anUnknownWriteSeenOnceCannotBeUndone() {
        h.write(B, V1, 0, 10);
        h.write(B, V2, 20, 0, Outcome.UNKNOWN);
        h.read(B, V2, 200, 210);
        h.read(B, V1, 300, 310);
        assertRejected(Kind.NEW_OLD_INVERSION);
    }

    @Test
    void aFailedWriteThatLandedAnywayIsLegal() {
        h.write(B, V1, 0, 10);
        h.write(B, V2, 20, 30, Outcome.FAILED);
        h.read(B, V1, 40, 50);
        h.read(B, V2, 60, 70);
        assertAccepted();
    }

    @Test
    void failedAndUnfinishedReadsObserveNothing() {
        h.write(B, V1, 0, 10);
        h.read(B, (Content) null, 20, 30, Outcome.FAILED);
        h.read(B, (Content) null, 40, 0, Outcome.UNKNOWN);
        h.read(B, V1, 50, 60);
        assertAccepted();
    }

    @Test
    void operationsMeetingAtOneInstantAreConcurrent() {
        h.write(B, V1, 0, 10);
        readInitial(10, 20);
        h.read(B, V1, 20, 30);
        assertAccepted();
    }

    @Test
    void zerosBeforeAnyWriteAndAnUntouchedBlockAreLegal() {
        readInitial(0, 5);
        h.write(B, V1, 10, 20);
        readInitial(12, 18);
        h.read(B, V1, 30, 40);
        h.read(B + 5, BlockVersion.INITIAL, 0, 1, Outcome.OK);
        assertAccepted();
    }

    @Test
    void recordedOperationsCarryTheirOutcome() throws Exception {
        History live = new History();
        History.Pending w = live.invokeWrite(B, V1);
        History.Pending lost = live.invokeWrite(B, V2);
        w.ok();
        History.Pending r = live.invokeRead(B);
        r.ok(new Content.Written(V1, B));
        live.invokeRead(B).failed("EIO");
        assertEquals(Outcome.OK, w.operation().outcome());
        assertEquals(Outcome.UNKNOWN, lost.operation().outcome());
        assertEquals(-1, lost.operation().completed());
        assertThrows(IllegalStateException.class, w::ok);
        assertEquals("writes {OK=1, FAILED=0, UNKNOWN=1}, reads {OK=1, FAILED=1, UNKNOWN=0}", live.summary());
        assertTrue(RegisterChecker.check(live).ok());
    }

    // ---- random histories from an atomic register

    /** One operation of a simulated history; {@code point} is where it took effect (-1: never). */
    private record Sim(boolean write, long block, BlockVersion value, long invoked, long completed, Outcome outcome,
            long point) {
    }

    private static final int HISTORIES = 400;

    @Test
    void randomLegalHistoriesAreAcceptedAndOneStaleReadInEachIsRejected() {
        Random random = new Random(20261207);
        int mutated = 0;
        for (int n = 0; n < HISTORIES; n++) {
            List<Sim> ops = simulate(random);
            List<Content> seen = observe(ops);
            Result legal = RegisterChecker.check(build(ops, seen));
            assertTrue(legal.ok(), "history " + n + " is legal: " + legal);

            // a read r made to return u, where u's write completed before an acknowledged write x was invoked and x
            // completed before r was invoked: every linearization orders u < x < r, so r cannot return u
            List<int[]> candidates = new ArrayList<>();
            for (int r = 0; r < ops.size(); r++) {
                Sim read = ops.get(r);
                if (read.write() || read.outcome() != Outcome.OK) {
                    continue;
                }
                for (Sim x : ops) {
                    if (!x.write() || x.block() != read.block() || x.outcome() != Outcome.OK
                            || x.completed() >= read.invoked()) {
                        continue;
                    }
                    candidates.add(new int[]{r, -1}); // zeros are older than any write
                    for (int u = 0; u < ops.size(); u++) {
                        Sim older = ops.get(u);
                        if (older.write() && older.block() == read.block() && older.outcome() == Outcome.OK
                                && older.completed() < x.invoked()) {
                            candidates.add(new int[]{r, u});
                        }
                    }
                }
            }
            if (candidates.isEmpty()) {
                continue;
            }
            int[] pick = candidates.get(random.nextInt(candidates.size()));
            List<Content> stale = new ArrayList<>(seen);
            Sim read = ops.get(pick[0]);
            stale.set(pick[0], pick[1] < 0 ? BlockVersion.INITIAL
                    : new Content.Written(ops.get(pick[1]).value(), read.block()));
            Result bad = RegisterChecker.check(build(ops, stale));
            assertFalse(bad.ok(), "history " + n + " with op " + pick[0] + " made to see "
                    + stale.get(pick[0]) + " is not linearizable, but was accepted: " + ops);
            assertTrue(bad.violations().stream().allMatch(v -> v.block() == read.block()), bad.toString());
            mutated++;
        }
        assertTrue(mutated > HISTORIES / 2, "only " + mutated + " of " + HISTORIES + " histories had a stale read");
    }

    /** 10 to 60 operations on one to three blocks, intervals and points random, some writes failed or unknown. */
    private static List<Sim> simulate(Random random) {
        int count = 10 + random.nextInt(51);
        int blocks = 1 + random.nextInt(3);
        long span = 100 + random.nextInt(2000);
        List<Sim> ops = new ArrayList<>();
        int seq = 0;
        for (int i = 0; i < count; i++) {
            long invoked = random.nextLong(span);
            long completed = invoked + random.nextLong(1 + random.nextInt(300));
            long block = random.nextInt(blocks);
            if (random.nextInt(5) < 2) {
                ops.add(new Sim(false, block, null, invoked, completed,
                        random.nextInt(10) == 0 ? Outcome.FAILED : Outcome.OK,
                        invoked + random.nextLong(completed - invoked + 1)));
                continue;
            }
            int roll = random.nextInt(10);
            Outcome outcome = roll == 0 ? Outcome.FAILED : roll == 1 ? Outcome.UNKNOWN : Outcome.OK;
            long point = outcome == Outcome.OK ? invoked + random.nextLong(completed - invoked + 1)
                    : random.nextBoolean() ? -1 : invoked + random.nextLong(2 * span); // lands late, or never
            ops.add(new Sim(true, block, new BlockVersion(1 + random.nextInt(4), ++seq), invoked, completed, outcome,
                    point));
        }
        return ops;
    }

    /** What each acknowledged read saw, running the operations in the order of their points. */
    private static List<Content> observe(List<Sim> ops) {
        List<Integer> order = new ArrayList<>();
        for (int i = 0; i < ops.size(); i++) {
            if (ops.get(i).point() >= 0) {
                order.add(i);
            }
        }
        order.sort(Comparator.comparingLong(i -> ops.get(i).point()));
        List<Content> seen = new ArrayList<>();
        ops.forEach(o -> seen.add(null));
        java.util.Map<Long, Content> register = new java.util.HashMap<>();
        for (int i : order) {
            Sim o = ops.get(i);
            if (o.write()) {
                register.put(o.block(), new Content.Written(o.value(), o.block()));
            } else {
                seen.set(i, register.getOrDefault(o.block(), BlockVersion.INITIAL));
            }
        }
        return seen;
    }

    private static History build(List<Sim> ops, List<Content> seen) {
        History history = History.handMade();
        for (int i = 0; i < ops.size(); i++) {
            Sim o = ops.get(i);
            if (o.write()) {
                history.write(o.block(), o.value(), o.invoked(), o.completed(), o.outcome());
            } else {
                history.read(o.block(), o.outcome() == Outcome.OK ? seen.get(i) : null, o.invoked(), o.completed(),
                        o.outcome());
            }
        }
        return history;
    }
}
