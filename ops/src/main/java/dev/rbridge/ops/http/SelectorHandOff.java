package dev.rbridge.ops.http;

import java.nio.channels.Selector;
import java.util.concurrent.ConcurrentLinkedQueue;

/**
 * What worker threads hand to the selector thread (an answer for its connection, a written-off worker's return),
 * and the wake-up that makes the selector thread look: a connection is touched by the selector thread only.
 */
final class SelectorHandOff {
    private final ConcurrentLinkedQueue<Runnable> queue = new ConcurrentLinkedQueue<>();
    private final Selector selector;

    SelectorHandOff(Selector selector) {
        this.selector = selector;
    }

    /** Any thread; if even this fails, the handler timeout still ends the connection. */
    void post(Runnable r) {
        try {
            queue.add(r);
            selector.wakeup();
        } catch (Throwable t) {
            // out of memory: the selector thread's deadline for the connection still holds
        }
    }

    /** Selector thread: the next thing handed over, or null. */
    Runnable poll() {
        return queue.poll();
    }
}
