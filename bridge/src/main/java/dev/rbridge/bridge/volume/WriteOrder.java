package dev.rbridge.bridge.volume;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * Keeps overlapping writes to a replicated slab in one order on every replica. Each replica's writes travel on
 * connections of their own (lanes, memservers), so two overlapping writes issued together may land in one order on
 * one replica and in the other on the next, and reads would then return one write or the other depending on the
 * replica they reach, for ever. A write therefore waits, before it is issued, until every in-flight write it overlaps
 * has completed on all replicas; writes that overlap nothing (nearly all of them) only pass through a short lock.
 *
 * <p>One per slab; {@link #enter} and {@link #leave} are its whole interface.
 */
final class WriteOrder {
    /** A write let through, until {@link #leave}. */
    static final class Ticket {
        final long from;
        final long to;
        final CompletableFuture<Void> done = new CompletableFuture<>();

        Ticket(long from, long to) {
            this.from = from;
            this.to = to;
        }
    }

    /** The writes in flight; guarded by this. Short: a slab has at most a client queue's worth in flight. */
    private final List<Ticket> inFlight = new ArrayList<>(4);

    /**
     * Lets a write of {@code [offset, offset + length)} through (returns its ticket: {@link #leave} it once the write
     * has completed on every replica), or returns null and sets {@code wait} to what to wait for before trying again.
     */
    synchronized Ticket enter(long offset, long length, CompletableFuture<?>[] wait) {
        long end = offset + length;
        List<CompletableFuture<Void>> overlapped = null;
        for (Ticket t : inFlight) {
            if (t.from < end && offset < t.to) {
                if (overlapped == null) {
                    overlapped = new ArrayList<>(2);
                }
                overlapped.add(t.done);
            }
        }
        if (overlapped != null) {
            wait[0] = overlapped.size() == 1 ? overlapped.getFirst()
                    : CompletableFuture.allOf(overlapped.toArray(CompletableFuture[]::new));
            return null;
        }
        Ticket t = new Ticket(offset, end);
        inFlight.add(t);
        return t;
    }

    /** The write of {@code t} completed (or failed) on every replica: writes waiting for it may go. */
    void leave(Ticket t) {
        synchronized (this) {
            inFlight.remove(t);
        }
        t.done.complete(null);
    }

    /** Writes in flight now (for tests). */
    synchronized int inFlight() {
        return inFlight.size();
    }
}
