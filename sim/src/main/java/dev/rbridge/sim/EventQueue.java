package dev.rbridge.sim;

import java.util.Comparator;
import java.util.PriorityQueue;

/**
 * The discrete-event engine: actions at simulated times (seconds), run in time order, those due at the same time in
 * the order they were scheduled, so a run is a function of its inputs and its seed alone.
 */
final class EventQueue {
    private record Event(double time, long sequence, Runnable action) {
    }

    private final PriorityQueue<Event> queue = new PriorityQueue<>(
            Comparator.comparingDouble(Event::time).thenComparingLong(Event::sequence));
    private long scheduled;
    private double now;

    /** The simulated time, seconds since the start. */
    double now() {
        return now;
    }

    /** Runs {@code action} at {@code time}, which must not lie in the past. */
    void at(double time, Runnable action) {
        if (!(time >= now)) {
            throw new IllegalArgumentException("an event at " + time + " s is in the past (now " + now + " s)");
        }
        queue.add(new Event(time, scheduled++, action));
    }

    /** Runs {@code action} {@code delay} seconds from now. */
    void after(double delay, Runnable action) {
        at(now + delay, action);
    }

    /** Runs every event due before {@code end}, in order (events may schedule more); returns how many ran. */
    long runUntil(double end) {
        long ran = 0;
        while (!queue.isEmpty() && queue.peek().time() < end) {
            Event e = queue.poll();
            now = e.time();
            e.action().run();
            ran++;
        }
        now = Math.max(now, end);
        return ran;
    }

    /** Events scheduled and not yet run. */
    int pending() {
        return queue.size();
    }
}
