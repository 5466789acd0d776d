package dev.rbridge.bridge.volume;

import org.junit.jupiter.api.Test;

import java.util.concurrent.CompletableFuture;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

class WriteOrderTest {
    final WriteOrder order = new WriteOrder();
    final CompletableFuture<?>[] wait = new CompletableFuture<?>[1];

    @Test
    void writesThatOverlapNothingGoAtOnce() {
        assertNotNull(order.enter(0, 4096, wait));
        assertNotNull(order.enter(4096, 4096, wait), "adjacent is not overlapping");
        assertNotNull(order.enter(1 << 20, 1 << 20, wait));
        assertEquals(3, order.inFlight());
    }

    @Test
    void anOverlappingWriteWaitsForEveryWriteItOverlapsToComplete() {
        WriteOrder.Ticket a = order.enter(0, 8192, wait);
        WriteOrder.Ticket b = order.enter(16384, 8192, wait);
        assertNull(order.enter(4096, 16384, wait), "overlaps both");
        CompletableFuture<?> both = wait[0];
        order.leave(a);
        assertFalse(both.isDone(), "b is still in flight");
        order.leave(b);
        assertTrue(both.isDone());
        assertNotNull(order.enter(4096, 16384, wait), "goes once both landed everywhere");
        assertEquals(1, order.inFlight());
    }

    @Test
    void aReadOfARangeAWriteIsLandingOnWaitsForItAndOthersDoNot() {
        assertNull(order.landing(0, 4096), "nothing in flight");
        WriteOrder.Ticket w = order.enter(8192, 4096, wait);
        assertNull(order.landing(0, 4096), "another range");
        CompletableFuture<Void> landing = order.landing(4096, 8192);
        assertNotNull(landing);
        assertFalse(landing.isDone());
        order.leave(w);
        assertTrue(landing.isDone());
        assertNull(order.landing(4096, 8192));
    }
}
