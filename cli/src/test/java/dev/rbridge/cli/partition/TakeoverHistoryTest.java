package dev.rbridge.cli.partition;

import dev.rbridge.cli.history.BlockVersion;
import dev.rbridge.cli.history.History;
import dev.rbridge.cli.history.History.Outcome;
import dev.rbridge.cli.history.RegisterChecker;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@link TakeoverHistory} on hand-made histories: B's grant at time 50, A's writers 101 on, B's 1 on. */
class TakeoverHistoryTest {
    private static final long GRANT = 50;
    private static final BlockVersion A1 = new BlockVersion(101, 1);
    private static final BlockVersion A2 = new BlockVersion(101, 2);
    private static final BlockVersion B1 = new BlockVersion(1, 1);

    private final History a = History.handMade();
    private final History b = History.handMade();

    private TakeoverHistory merged() {
        return new TakeoverHistory(a, b, GRANT);
    }

    @Test
    void bReadsAsAcknowledgedWriteThenItsOwn() {
        a.write(7, A1, 0, 10);
        b.read(7, A1, 60, 70);
        b.write(7, B1, 80, 90);
        b.read(7, B1, 100, 110);
        TakeoverHistory m = merged();
        assertTrue(m.check().ok(), m.check().toString());
        assertTrue(m.fencingViolations().isEmpty());
    }

    @Test
    void aFailedWriteOfANobodyReadIsLeftOut() {
        a.write(7, A1, 0, 10);
        a.write(7, A2, 20, 30, Outcome.FAILED);
        a.write(7, new BlockVersion(101, 3), 40, -1, Outcome.UNKNOWN);
        b.read(7, A1, 60, 70);
        TakeoverHistory m = merged();
        assertTrue(m.check().ok(), m.check().toString());
    }

    /** A plain merge would accept this: a failed write may land at any time; fenced, only before the grant. */
    @Test
    void aFailedWriteOfAReadAfterBsOwnWriteIsStale() {
        a.write(7, A2, 20, 30, Outcome.FAILED);
        b.write(7, B1, 60, 70);
        b.read(7, A2, 80, 90);
        RegisterChecker.Result r = merged().check();
        assertEquals(Map.of(RegisterChecker.Kind.LOST_WRITE, 1), RegisterChecker.kinds(r), r.toString());
        List<History.Operation> plain = new ArrayList<>(a.operations());
        plain.addAll(b.operations());
        assertTrue(RegisterChecker.check(plain, a::describe).ok(), "without fencing the history is linearizable");
    }

    @Test
    void aFailedWriteOfASentAfterTheGrantAndReadIsAFencingViolation() {
        a.write(7, A2, 60, 65, Outcome.FAILED);
        b.read(7, A2, 70, 80);
        TakeoverHistory m = merged();
        assertEquals(1, m.fencingViolations().size(), m.fencingViolations().toString());
        assertTrue(m.fencingViolations().getFirst().contains("after B's grant"), m.fencingViolations().toString());
    }

    @Test
    void aWriteAcknowledgedByAAfterTheGrantThoughSentAfterItIsAFencingViolation() {
        a.write(7, A2, 60, 65);
        TakeoverHistory m = merged();
        assertEquals(1, m.fencingViolations().size(), m.fencingViolations().toString());
    }

    @Test
    void anAcknowledgedWriteOfALostInTheTakeoverIsReported() {
        a.write(7, A1, 0, 10);
        b.read(7, BlockVersion.INITIAL, 60, 70, Outcome.OK);
        RegisterChecker.Result r = merged().check();
        assertEquals(Map.of(RegisterChecker.Kind.LOST_WRITE, 1), RegisterChecker.kinds(r), r.toString());
    }
}
