package dev.rbridge.bridge.volume;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * Keeps overlapping writes to a replicated slab in one order on every replica, and reads of a range from seeing a
 * write on one replica and then, later, not on another. Each replica's writes travel on connections of their own
 * (lanes, memservers), so two overlapping writes issued together may land in one order on one replica and in the other
 * on the next, and reads would then return one write or the other depending on the replica they reach, for ever; and
 * while one write lands replica by replica, a read served by a replica that has it followed by a read served by one
 * that has not yet would go back in time. So a write waits, before it is issued, until every in-flight write it
 * overlaps has completed on all replicas, and a read of a range a write is landing on waits for that write too. Writes
 * and reads that overlap nothing (nearly all of them) pass through a short lock or, reads with no write in flight, a
 * volatile read.
 *
 * <p>One per slab: {@link #enter} and {@link #leave} for writes, {@link #landing} for reads.
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
     * {@code inFlight.size()}, readable without the lock: a write is counted before it is issued, so a read that
     * begins after another read saw the write's data on a replica sees the count (and waits) if the write is not done.
     */
    private volatile int count;

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
        count = inFlight.size();
        return t;
    }

    /**
     * What a read of {@code [offset, offset + length)} must wait for: the in-flight writes it overlaps, which may have
     * reached some replicas and not others; null when there are none (the read may go to any replica now).
     */
    CompletableFuture<Void> landing(long offset, long length) {
        if (count == 0) {
            return null;
        }
        long end = offset + length;
        List<CompletableFuture<Void>> overlapped = null;
        synchronized (this) {
            for (Ticket t : inFlight) {
                if (t.from < end && offset < t.to) {
                    if (overlapped == null) {
                        overlapped = new ArrayList<>(2);
                    }
                    overlapped.add(t.done);
                }
            }
        }
        if (overlapped == null) {
            return null;
        }
        return overlapped.size() == 1 ? overlapped.getFirst()
                : CompletableFuture.allOf(overlapped.toArray(CompletableFuture[]::new));
    }

    /** The write of {@code t} completed (or failed) on every replica: writes waiting for it may go. */
    void leave(Ticket t) {
        synchronized (this) {
            inFlight.remove(t);
            count = inFlight.size();
        }
        t.done.complete(null);
    }

    /** Writes in flight now (for tests). */
    synchronized int inFlight() {
        return inFlight.size();
    }
}
