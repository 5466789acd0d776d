package dev.rbridge.cli.history;

import dev.rbridge.cli.history.BlockVersion.Content;

import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * What a workload did to a block device, for {@link RegisterChecker}: every write (block, version) and every read
 * (block, what it saw), each with its invocation and completion times ({@link System#nanoTime}) and its outcome.
 * Thread-safe: many workload threads record into one history.
 *
 * <p>Recording is two steps, so an operation that never completes (the process died, the call timed out and its
 * thread gave up) stays in the history as {@link Outcome#UNKNOWN}:
 * <pre>
 * History.Pending p = history.invokeWrite(block, version);   // just before sending it
 * ... p.ok() / p.failed("EIO") / nothing at all
 * History.Pending r = history.invokeRead(block);
 * ... r.ok(BlockVersion.decode(bytes)) / r.failed("timed out")
 * </pre>
 * A write that failed or whose outcome is unknown may or may not have taken effect, at any time after its invocation;
 * a read that failed or never completed observed nothing. {@link #write} and {@link #read} add finished operations
 * with given times, for hand-made histories.
 */
public final class History {
    /** What an operation did. */
    public enum Kind {
        WRITE, READ
    }

    /** How it ended: acknowledged, refused with an error, or not known (no completion seen). */
    public enum Outcome {
        OK, FAILED, UNKNOWN
    }

    /**
     * One operation.
     *
     * @param id        its index in the history, in invocation order
     * @param written   the version a write wrote (null for a read)
     * @param observed  what a read saw (null for a write, or for a read that did not complete with OK)
     * @param completed the completion time, or -1 when there was none ({@link Outcome#UNKNOWN})
     * @param note      why it failed, or null
     */
    public record Operation(int id, Kind kind, long block, BlockVersion written, Content observed, long invoked,
            long completed, Outcome outcome, String note) {
        public boolean isWrite() {
            return kind == Kind.WRITE;
        }

        /**
         * The end of the window in which this operation may take effect: its completion if it was acknowledged, or
         * never ({@link Long#MAX_VALUE}) if it failed or its outcome is unknown, as such a write may still land.
         */
        public long effectiveEnd() {
            return outcome == Outcome.OK ? completed : Long.MAX_VALUE;
        }

        /** One line: {@code write#12 block 7 w2:37 [1.204..1.388 ms ok]}; see {@link History#describe}. */
        String describe(long origin, boolean nanos) {
            String what = isWrite() ? "write#" + id + " block " + block + " " + written
                    : "read#" + id + " block " + block + (observed == null ? "" : " saw " + seen());
            String end = completed < 0 ? "..never" : ".." + time(completed - origin, nanos);
            return what + " [" + time(invoked - origin, nanos) + end + (nanos ? " ms " : " ")
                    + outcome.name().toLowerCase() + (note == null ? "" : ": " + note) + "]";
        }

        /** What a read saw, the block left out when it is this one. */
        private String seen() {
            return observed instanceof Content.Written w && w.block() == block ? w.version().toString()
                    : observed.toString();
        }

        private static String time(long t, boolean nanos) {
            return nanos ? String.format("%.3f", t / 1e6) : Long.toString(t);
        }
    }

    private final long origin;
    private final boolean nanos;
    private final List<Operation> operations = new ArrayList<>();

    /** A history of {@link System#nanoTime} times, printed in milliseconds from now. */
    public History() {
        this.origin = System.nanoTime();
        this.nanos = true;
    }

    /** A hand-made history: times are plain numbers ({@link #write}, {@link #read}), printed as they are. */
    public static History handMade() {
        return new History(0, false);
    }

    private History(long origin, boolean nanos) {
        this.origin = origin;
        this.nanos = nanos;
    }

    /**
     * One line naming the operation: {@code write#12 block 7 w2:37 [1.204..1.388 ms ok]} (times in ms since this
     * history began) or {@code read#3 block 7 saw w2:37 (of block 7) [20..30 ok]} (hand-made times).
     */
    public String describe(Operation o) {
        return o.describe(origin, nanos);
    }

    /** Records the invocation of a write of {@code version} to {@code block}, now. */
    public Pending invokeWrite(long block, BlockVersion version) {
        Objects.requireNonNull(version, "version");
        return new Pending(add(Kind.WRITE, block, version, null, System.nanoTime(), -1, Outcome.UNKNOWN, null));
    }

    /** Records the invocation of a read of {@code block}, now. */
    public Pending invokeRead(long block) {
        return new Pending(add(Kind.READ, block, null, null, System.nanoTime(), -1, Outcome.UNKNOWN, null));
    }

    /**
     * Adds a finished write with given times (a hand-made history); {@code completed} is ignored for an
     * {@link Outcome#UNKNOWN} one.
     */
    public Operation write(long block, BlockVersion version, long invoked, long completed, Outcome outcome) {
        Objects.requireNonNull(version, "version");
        return get(add(Kind.WRITE, block, version, null, invoked, completed, outcome, null));
    }

    /** Adds a finished read that saw {@code observed} (ignored unless {@code outcome} is OK), with given times. */
    public Operation read(long block, Content observed, long invoked, long completed, Outcome outcome) {
        return get(add(Kind.READ, block, null, outcome == Outcome.OK ? Objects.requireNonNull(observed) : null,
                invoked, completed, outcome, null));
    }

    /** As {@link #read(long, Content, long, long, Outcome)}, acknowledged, having seen {@code observed}. */
    public Operation read(long block, BlockVersion observed, long invoked, long completed) {
        return read(block, new Content.Written(observed, block), invoked, completed, Outcome.OK);
    }

    /** As {@link #write(long, BlockVersion, long, long, Outcome)}, acknowledged. */
    public Operation write(long block, BlockVersion version, long invoked, long completed) {
        return write(block, version, invoked, completed, Outcome.OK);
    }

    private synchronized int add(Kind kind, long block, BlockVersion written, Content observed, long invoked,
            long completed, Outcome outcome, String note) {
        if (outcome != Outcome.UNKNOWN && completed < invoked) {
            throw new IllegalArgumentException("completed at " + completed + " before its invocation at " + invoked);
        }
        int id = operations.size();
        operations.add(new Operation(id, kind, block, written, observed, invoked,
                outcome == Outcome.UNKNOWN ? -1 : completed, outcome, note));
        return id;
    }

    private synchronized Operation get(int id) {
        return operations.get(id);
    }

    private synchronized void complete(int id, Content observed, Outcome outcome, String note) {
        long now = System.nanoTime();
        Operation o = operations.get(id);
        if (o.outcome() != Outcome.UNKNOWN) {
            throw new IllegalStateException("operation " + id + " completed twice");
        }
        operations.set(id, new Operation(id, o.kind(), o.block(), o.written(), observed, o.invoked(), now, outcome,
                note));
    }

    /** A snapshot of every operation so far, by id; those not completed yet are {@link Outcome#UNKNOWN}. */
    public synchronized List<Operation> operations() {
        return List.copyOf(operations);
    }

    /** How many operations of {@code kind} ended with each outcome. */
    public synchronized Map<Outcome, Integer> count(Kind kind) {
        Map<Outcome, Integer> n = new EnumMap<>(Outcome.class);
        for (Outcome o : Outcome.values()) {
            n.put(o, 0);
        }
        for (Operation o : operations) {
            if (o.kind() == kind) {
                n.merge(o.outcome(), 1, Integer::sum);
            }
        }
        return n;
    }

    /** {@code writes {OK=.., FAILED=.., UNKNOWN=..}, reads {...}}, for test messages. */
    public String summary() {
        return "writes " + count(Kind.WRITE) + ", reads " + count(Kind.READ);
    }

    /** An operation invoked and not yet completed; complete it at most once. */
    public final class Pending {
        private final int id;

        private Pending(int id) {
            this.id = id;
        }

        /** The write was acknowledged, now. */
        public void ok() {
            if (get(id).kind() != Kind.WRITE) {
                throw new IllegalStateException("a read completes with what it saw");
            }
            complete(id, null, Outcome.OK, null);
        }

        /** The read returned, now, and its bytes say {@code observed}. */
        public void ok(Content observed) {
            if (get(id).kind() != Kind.READ) {
                throw new IllegalStateException("a write observes nothing");
            }
            complete(id, Objects.requireNonNull(observed, "observed"), Outcome.OK, null);
        }

        /** The operation failed (an I/O error, a timeout), now; a write's effect is then unknown. */
        public void failed(String why) {
            complete(id, null, Outcome.FAILED, why);
        }

        public Operation operation() {
            return get(id);
        }
    }
}
