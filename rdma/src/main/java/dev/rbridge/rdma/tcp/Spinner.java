package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.link.Link;

import java.io.IOException;
import java.util.function.LongSupplier;

/**
 * Spin-then-block for the one thread that reads a connection (the client's reader, the memserver's connection
 * thread): before a read that would block, poll the socket for input for a bounded time, yielding the CPU between
 * polls. A thread blocked in a read is woken by the kernel, and on small VMs a wake-up across CPUs costs tens of
 * microseconds each way, several times a 4K round trip without wake-ups; polling takes both wake-ups out when the two
 * ends run on different CPUs (both ends must poll: either alone keeps one wake-up). With both ends on one CPU polling
 * costs instead, since the poller takes the CPU its peer needs: that placement is not the one this serves. The
 * measurements are in bench/README.md (rdma-tcp.sh --pin split and --pin same).
 *
 * <p>It never burns a CPU while idle: after the budget the thread blocks as before, and every poll that ends empty
 * doubles the number of following waits that block at once (up to {@link #MAX_SKIP}), so a sparse load, whose input
 * comes after the budget anyway, seldom polls; a poll that finds input resets this. Used by its thread only.
 */
final class Spinner {
    /**
     * How long to poll before blocking: several QD1 round trips without wake-ups, so input that comes at all comes
     * well within it; twice as long measured no better (bench/README.md) and burns twice as long after the last
     * message.
     */
    static final long BUDGET_NANOS = 50_000;
    /**
     * Longest poll however many requests are issued meanwhile (each restarts the budget): a peer that stopped
     * answering while its client keeps issuing must not keep the reader polling until the operation timeout.
     */
    static final long MAX_POLL_NANOS = 20 * BUDGET_NANOS;
    /** Most waits that block at once after a run of empty polls. */
    static final int MAX_SKIP = 1024;

    private final Link socket;
    /** Waits left that block at once. */
    private int skip;
    /** The skip set by the last empty poll: doubled by the next one, cleared by a poll that finds input. */
    private int backoff;

    /** Counts the requests issued on the connection (client side), or null (memserver side). */
    private final LongSupplier issued;

    /**
     * {@code socket}: the connection, used only for {@link Link#available()}; {@code issued}:
     * a count of the requests issued on it, or null. A request issued while polling restarts the budget (up to
     * {@link #MAX_POLL_NANOS} in all): its reply is due a round trip later, whatever the wait before it was (a reader
     * thread whose last reply woke the thread that issues the next request polls through that wake-up).
     */
    Spinner(Link socket, LongSupplier issued) {
        this.socket = socket;
        this.issued = issued;
    }

    /**
     * Polls for input for up to the budget (restarted by requests issued meanwhile, see the constructor); true when
     * input came, false when the caller should block reading.
     */
    boolean await() throws IOException {
        return await(null);
    }

    /**
     * As {@link #await()}, but also returns false as soon as {@code stop} says so (a caller asking for the read role,
     * in caller-driven mode); such a stop does not count as an empty poll.
     */
    boolean await(java.util.function.BooleanSupplier stop) throws IOException {
        if (skip > 0) {
            skip--;
            return false;
        }
        long first = System.nanoTime();
        long start = first;
        long seen = issued == null ? 0 : issued.getAsLong();
        while (socket.available() == 0) {
            if (stop != null && stop.getAsBoolean()) {
                return false;
            }
            long now = System.nanoTime();
            if (issued != null && now - first < MAX_POLL_NANOS) {
                long count = issued.getAsLong();
                if (count != seen) {
                    seen = count;
                    start = now;
                }
            }
            if (now - start >= BUDGET_NANOS) {
                backoff = Math.min(MAX_SKIP, Math.max(1, backoff * 2));
                skip = backoff;
                return false;
            }
            Thread.yield(); // the peer, or a thread we are waiting for, may be runnable on this CPU
        }
        backoff = 0;
        return true;
    }
}
