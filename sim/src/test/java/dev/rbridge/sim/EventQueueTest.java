package dev.rbridge.sim;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

class EventQueueTest {
    @Test
    void runsEventsInTimeOrderAndTiesInTheOrderScheduled() {
        EventQueue q = new EventQueue();
        List<String> ran = new ArrayList<>();
        q.at(3, () -> ran.add("c@" + q.now()));
        q.at(1, () -> {
            ran.add("a@" + q.now());
            q.after(1, () -> ran.add("b@" + q.now())); // scheduled while running, due before c
        });
        q.at(5, () -> ran.add("e1@" + q.now()));
        q.at(5, () -> ran.add("e2@" + q.now()));
        q.at(9, () -> ran.add("late"));

        assertEquals(5, q.runUntil(6));
        assertEquals(List.of("a@1.0", "b@2.0", "c@3.0", "e1@5.0", "e2@5.0"), ran);
        assertEquals(6, q.now());
        assertEquals(1, q.pending());
    }

    @Test
    void refusesAnEventInThePast() {
        EventQueue q = new EventQueue();
        q.runUntil(10);
        assertThrows(IllegalArgumentException.class, () -> q.at(9, () -> {
        }));
        assertThrows(IllegalArgumentException.class, () -> q.after(Double.NaN, () -> {
        }));
    }
}
