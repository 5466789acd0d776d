package dev.rbridge.nbd.server;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class PayloadBudgetTest {
    private final List<String> woken = new ArrayList<>();

    private PayloadBudget.Account open(PayloadBudget b, String peer, String name) {
        return b.open(peer, () -> woken.add(name));
    }

    @Test
    void eachShareBoundsWhatIsHeld() {
        PayloadBudget b = new PayloadBudget(100, 60, 40);
        PayloadBudget.Account a1 = open(b, "a", "a1");
        PayloadBudget.Account a2 = open(b, "a", "a2");
        PayloadBudget.Account c1 = open(b, "c", "c1");
        assertTrue(a1.tryAcquire(30));
        assertFalse(a1.tryAcquire(20), "a1's own share (40)");
        assertTrue(a2.tryAcquire(30));
        assertFalse(a2.tryAcquire(10), "peer a's share (60)");
        assertTrue(c1.tryAcquire(40));
        assertEquals(100, b.used());
        assertFalse(open(b, "d", "d1").tryAcquire(1), "the total (100)");
    }

    @Test
    void aRequestLargerThanAShareStillPassesAlone() {
        PayloadBudget b = new PayloadBudget(100, 50, 10);
        PayloadBudget.Account a = open(b, "a", "a");
        assertTrue(a.tryAcquire(50), "larger than the connection's share, but it holds nothing");
        assertFalse(a.tryAcquire(1));
        a.close();
        a.release(50);
        assertTrue(open(b, "x", "x").tryAcquire(100), "the whole budget, when nothing is held");
    }

    @Test
    void returnedBytesGoToTheSmallestNeedFirstAndNewcomersCannotTakeThem() {
        PayloadBudget b = new PayloadBudget(100, 100, 100);
        PayloadBudget.Account hog = open(b, "p", "hog");
        PayloadBudget.Account big = open(b, "p", "big");
        PayloadBudget.Account small = open(b, "p", "small");
        assertTrue(hog.tryAcquire(90));
        assertFalse(big.tryAcquire(50));
        assertFalse(small.tryAcquire(20));
        assertEquals(2, b.waiting());
        hog.release(40); // 50 free: small (20) first, then big (50) no longer fits
        assertEquals(List.of("small"), woken);
        assertEquals(1, b.waiting());
        PayloadBudget.Account newcomer = open(b, "p", "newcomer");
        assertFalse(newcomer.tryAcquire(40), "30 are free; the 20 reserved are not");
        newcomer.close();
        assertTrue(small.tryAcquire(20), "the reservation");
        assertEquals(70, b.used());
        hog.release(50); // 80 free: big at last
        assertEquals(List.of("small", "big"), woken);
        assertTrue(big.tryAcquire(50));
    }

    @Test
    void aReservationAskedForDifferentlyOrAbandonedGoesBack() {
        PayloadBudget b = new PayloadBudget(100, 100, 100);
        PayloadBudget.Account hog = open(b, "p", "hog");
        PayloadBudget.Account w1 = open(b, "p", "w1");
        PayloadBudget.Account w2 = open(b, "p", "w2");
        assertTrue(hog.tryAcquire(100));
        assertFalse(w1.tryAcquire(30));
        hog.release(30);
        assertEquals(List.of("w1"), woken);
        assertFalse(w2.tryAcquire(30), "reserved for w1");
        w1.close(); // gone before it came for it: w2 gets it
        assertEquals(List.of("w1", "w2"), woken);
        assertTrue(w2.tryAcquire(30));
        assertEquals(100, b.used());
    }

    @Test
    void pressureNamesWhoseMemoryWouldHelp() {
        PayloadBudget b = new PayloadBudget(100, 50, 50);
        PayloadBudget.Account a = open(b, "a", "a");
        PayloadBudget.Account a2 = open(b, "a", "a2");
        assertTrue(a.tryAcquire(50));
        assertFalse(b.pressure().wouldHelp("a"));
        assertFalse(a.tryAcquire(1), "stopped by its own share: waits for itself");
        assertFalse(b.pressure().wouldHelp("a"));
        assertFalse(a2.tryAcquire(10), "stopped by peer a's share");
        assertTrue(b.pressure().wouldHelp("a"));
        assertFalse(b.pressure().wouldHelp("c"));
        PayloadBudget.Account c = open(b, "c", "c");
        assertTrue(c.tryAcquire(50));
        assertFalse(open(b, "d", "d").tryAcquire(10), "stopped by the total");
        assertTrue(b.pressure().wouldHelp("c"));
    }

    @Test
    void releasingMoreThanHeldIsABug() {
        PayloadBudget b = new PayloadBudget(100, 100, 100);
        PayloadBudget.Account a = open(b, "a", "a");
        assertTrue(a.tryAcquire(10));
        assertThrows(IllegalStateException.class, () -> a.release(11));
    }

    @Test
    void sharesMustNest() {
        assertThrows(IllegalArgumentException.class, () -> new PayloadBudget(100, 200, 10));
        assertThrows(IllegalArgumentException.class, () -> new PayloadBudget(100, 50, 60));
        assertThrows(IllegalArgumentException.class, () -> new PayloadBudget(100, 50, 0));
    }

    @Test
    void anOptionalTakeNeverWaitsNorTakesFromThoseWhoDo() {
        PayloadBudget b = new PayloadBudget(100, 100, 60);
        PayloadBudget.Account a = open(b, "a", "a");
        PayloadBudget.Account c = open(b, "c", "c");
        assertTrue(a.tryAcquire(50));
        assertFalse(a.tryTake(20), "past the connection's share");
        assertEquals(0, b.waiting(), "a refused optional take is no wait");
        assertEquals(50, b.used());
        assertTrue(a.tryTake(10));
        assertEquals(60, b.used());
        assertTrue(c.tryAcquire(40));
        assertFalse(c.tryAcquire(20), "the total is used up: c waits");
        assertEquals(1, b.waiting());
        a.release(10); // not enough for c, which goes on waiting
        assertFalse(a.tryTake(5), "someone waits for memory: an optional take leaves it to them");
        assertEquals(1, b.waiting());
    }
}
