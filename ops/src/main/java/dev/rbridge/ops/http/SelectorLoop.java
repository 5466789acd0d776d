package dev.rbridge.ops.http;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.channels.ClosedSelectorException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.util.Iterator;
import java.util.concurrent.TimeUnit;

/**
 * The selector thread of one server: sleeps until a connection is ready, a deadline falls or a worker hands
 * something over; then closes what overran its deadline, takes the workers' answers, reads and writes the ready
 * connections and accepts newcomers, last. Nothing a peer sends ends it, only {@link #stop()}.
 */
final class SelectorLoop {
    /** The server's one logger, named for {@link OpsHttpServer} as operators configure it. */
    private static final Logger log = LoggerFactory.getLogger(OpsHttpServer.class);
    /** Longest sleep of the selector when no deadline is nearer. */
    private static final long MAX_SELECT_NANOS = TimeUnit.SECONDS.toNanos(1);

    private final String name;
    private final RefusalLog refusals;
    private final Selector selector;
    private final SelectionKey acceptKey;
    private final HttpConnectionSlots slots;
    private final SelectorHandOff handOff;
    private final Thread thread;
    private volatile boolean running = true;

    SelectorLoop(String name, RefusalLog refusals, Selector selector, SelectionKey acceptKey, HttpConnectionSlots slots,
            SelectorHandOff handOff) {
        this.name = name;
        this.refusals = refusals;
        this.selector = selector;
        this.acceptKey = acceptKey;
        this.slots = slots;
        this.handOff = handOff;
        this.thread = Thread.ofPlatform().name("ops-http-" + name).daemon().unstarted(this::run);
    }

    void start() {
        thread.start();
    }

    /** Ends the loop and waits (a while) for its thread, which closes every connection; false if already ended. */
    boolean stop() {
        if (!running) {
            return false;
        }
        running = false;
        selector.wakeup();
        try {
            thread.join(TimeUnit.SECONDS.toMillis(5));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return true;
    }

    private void run() {
        try {
            while (running) {
                try {
                    if (!round()) {
                        break;
                    }
                } catch (ClosedSelectorException e) {
                    break;
                } catch (Throwable t) { // nothing a peer sends may end the loop that serves the others
                    if (!running) {
                        break;
                    }
                    log.error("ops http {}: the selector loop failed and carries on", name, t);
                    pauseQuietly();
                }
            }
        } finally {
            slots.closeAll();
        }
    }

    /** One wait and what it found; false when the server stops. */
    private boolean round() throws IOException {
        long now = System.nanoTime();
        long next = sweep(now);
        selector.select(Math.max(1, TimeUnit.NANOSECONDS.toMillis(next - now) + 1));
        if (!running) {
            return false;
        }
        for (Runnable r; (r = handOff.poll()) != null;) {
            try {
                r.run();
            } catch (RuntimeException e) { // one connection's trouble; the other answers still go out
                refusals.warn("connection-failure", "handing an answer to its connection failed", e);
            }
        }
        // connections first, newcomers last: a request that has arrived is read (and, once whole, can
        // no longer be evicted) before a new connection in the same round could evict its sender
        boolean acceptable = false;
        Iterator<SelectionKey> it = selector.selectedKeys().iterator();
        while (it.hasNext()) {
            SelectionKey k = it.next();
            it.remove();
            if (k == acceptKey) {
                acceptable = true;
            } else if (k.attachment() instanceof HttpConnection c) {
                c.ready(k);
            }
        }
        if (acceptable) {
            slots.accept();
        }
        return true;
    }

    /** Closes what has overrun its deadline; returns when the next deadline falls. */
    private long sweep(long now) {
        long next = slots.resumeAccepting(now, now + MAX_SELECT_NANOS);
        for (HttpConnection c : slots.snapshot()) {
            long deadline = c.deadline();
            if (deadline == Long.MAX_VALUE) {
                continue;
            }
            if (now - deadline >= 0) {
                c.expire();
            } else if (deadline - next < 0) {
                next = deadline;
            }
        }
        return next;
    }

    private static void pauseQuietly() {
        try {
            Thread.sleep(10);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
