package dev.rbridge.cli.history;

import dev.rbridge.cli.history.BlockVersion.Content;
import dev.rbridge.cli.history.History.Operation;
import dev.rbridge.cli.history.History.Outcome;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Function;

/**
 * Checks a {@link History} for linearizability, each block on its own as a read/write register whose writes all
 * write distinct values ({@link BlockVersion}s), starting from the initial zeros. A read must return the latest
 * write that took effect before it, or one concurrent with it; an acknowledged write takes effect within its
 * interval, a failed or unknown one at any time after its invocation or never; failed and unknown reads are ignored.
 *
 * <h2>The algorithm (zones, after Gibbons and Korach)</h2>
 * Operations (a virtual write of the initial zeros at time minus infinity included) are intervals
 * {@code [invoked, end]}, {@code end} being the completion of an acknowledged operation and plus infinity otherwise.
 * The <em>cluster</em> of a value is its write and the reads that returned it. For a cluster, {@code f} is the
 * earliest end of its operations and {@code s} the latest invocation. If {@code f < s} the cluster's <em>forward
 * zone</em> is {@code (f, s)}; otherwise its <em>backward zone</em> is {@code [s, f]}. After the local checks (every
 * read decodes, names this block, returns a value written to it, and does not end before that write was invoked),
 * the block is linearizable if and only if
 * <ol>
 * <li>no two forward zones intersect, and</li>
 * <li>no backward zone lies inside a forward zone ({@code f_a < s_b} and {@code f_b < s_a}).</li>
 * </ol>
 * <b>Necessary.</b> In any linearization a value is current over one contiguous stretch (values are unique, so
 * once overwritten a value never comes back), which holds its write and all its reads. That stretch begins at or
 * before {@code f} (an operation ending at {@code f} is linearized by then) and ends at or after {@code s}. So two
 * forward clusters would each be current over all of their overlapping part: impossible. If backward cluster
 * {@code b} lay inside forward zone {@code (f_a, s_a)}, {@code a} is current over it all, so {@code b}'s stretch
 * would be wholly before {@code f_a} or wholly after {@code s_a}; but {@code b}'s operation invoked at {@code s_b >
 * f_a} is linearized after {@code f_a}, and its operation ending at {@code f_b < s_a} before {@code s_a}.
 * <br><b>Sufficient.</b> Place a forward cluster's write at {@code max(invoked, f)} and each of its reads at
 * {@code max(invoked, the write's point)}: all within {@code [f, s]} and within their own intervals (a read ends
 * at or after {@code f} and after its write's invocation). Every operation of a backward cluster spans
 * {@code [s, f]}; by (2) and since the open forward zones are disjoint (1), the connected {@code [s, f]} is not
 * covered by them, so it has a point outside all of them: place the whole cluster there, write first. Order by
 * point, equal points by cluster and write first (equal points break no real-time order: both operations span that
 * instant). Each cluster is then contiguous and starts with its write, so every read returns the latest write.
 *
 * <p>Times that are equal count as concurrent (nothing precedes an operation invoked at the very nanosecond it
 * ended), so coarse clocks can only make the checker more lenient. The cost is O(n log n) per block.
 *
 * <p>A violation is reported with the block, a kind ({@link Kind}) and the operations that prove it, in one line.
 */
public final class RegisterChecker {
    private RegisterChecker() {}

    /** What went wrong, named after the usual story behind it. */
    public enum Kind {
        /** A read returned bytes that are neither zeros nor a whole version (torn, garbled). */
        CORRUPT,
        /** A read returned a whole version written for another block. */
        FOREIGN,
        /** A read returned a version never written to this block. */
        UNWRITTEN,
        /** A read returned a version whose write was invoked only after the read had completed. */
        READ_BEFORE_WRITE,
        /** A read returned a value overwritten by a write that completed before the read began. */
        STALE_READ,
        /** As a stale read, by a read that began when the block was quiet (every write invoked, none pending). */
        LOST_WRITE,
        /**
         * A read returned a value that a value seen by an earlier read (completed before it began) had replaced: the
         * register went from new to old, typically during one long write.
         */
        NEW_OLD_INVERSION,
        /** Two values each current after the other had been: an overwritten value came back. */
        RESURRECTION
    }

    /**
     * One proof that a block is not linearizable.
     *
     * @param what       the story, one line, naming the operations
     * @param operations the operations involved
     */
    public record Violation(long block, Kind kind, String what, List<Operation> operations) {
        public String line() {
            return "block " + block + " " + kind + ": " + what;
        }
    }

    /** The verdict on a whole history. */
    public record Result(int blocks, int operations, List<Violation> violations) {
        /** Lines at most in {@link #toString()}. */
        public static final int DEFAULT_REPORT_LINES = 20;

        public boolean ok() {
            return violations.isEmpty();
        }

        /** A summary line, then at most {@code maxLines} violations (one line each), then how many were left out. */
        public String report(int maxLines) {
            StringBuilder b = new StringBuilder();
            long bad = violations.stream().mapToLong(Violation::block).distinct().count();
            b.append(operations).append(" operations on ").append(blocks).append(" blocks: ");
            if (ok()) {
                return b.append("linearizable").toString();
            }
            b.append(violations.size()).append(" violations in ").append(bad).append(" blocks");
            for (int i = 0; i < Math.min(maxLines, violations.size()); i++) {
                b.append('\n').append(violations.get(i).line());
            }
            if (violations.size() > maxLines) {
                b.append("\n... and ").append(violations.size() - maxLines).append(" more");
            }
            return b.toString();
        }

        @Override
        public String toString() {
            return report(DEFAULT_REPORT_LINES);
        }
    }

    /** Checks every block of {@code history}. */
    public static Result check(History history) {
        return check(history.operations(), history::describe);
    }

    /**
     * Checks {@code operations}, grouped by block, describing operations with {@code describe}. Throws
     * IllegalArgumentException if two writes to one block write the same version (the workload's bug, not the
     * device's).
     */
    public static Result check(List<Operation> operations, Function<Operation, String> describe) {
        Map<Long, List<Operation>> byBlock = new TreeMap<>();
        for (Operation o : operations) {
            byBlock.computeIfAbsent(o.block(), k -> new ArrayList<>()).add(o);
        }
        List<Violation> violations = new ArrayList<>();
        for (Map.Entry<Long, List<Operation>> e : byBlock.entrySet()) {
            new BlockCheck(e.getKey(), e.getValue(), describe, violations).run();
        }
        return new Result(byBlock.size(), operations.size(), List.copyOf(violations));
    }

    /** A value's write and reads, with its zone; {@code write} is null for the initial zeros. */
    private static final class Cluster {
        final String value;
        final Operation write;
        final List<Operation> reads = new ArrayList<>();
        long f;
        long s;
        /** The operation ending at {@link #f} (null: the initial zeros' virtual write) and the one invoked at s. */
        Operation first;
        Operation last;

        Cluster(String value, Operation write) {
            this.value = value;
            this.write = write;
        }

        void computeZone() {
            f = Long.MAX_VALUE;
            s = Long.MIN_VALUE;
            if (write == null) {
                f = Long.MIN_VALUE;
            } else {
                include(write);
            }
            for (Operation r : reads) {
                include(r);
            }
        }

        private void include(Operation o) {
            if (o.effectiveEnd() < f || first == null && f == Long.MAX_VALUE) {
                f = o.effectiveEnd();
                first = o;
            }
            if (o.invoked() > s) {
                s = o.invoked();
                last = o;
            }
        }

        boolean forward() {
            return f < s;
        }
    }

    private static final class BlockCheck {
        private final long block;
        private final List<Operation> ops;
        private final Function<Operation, String> describe;
        private final List<Violation> out;
        /** The last write invocation or acknowledged completion: a read begun after it finds the block quiet. */
        private long quietFrom = Long.MIN_VALUE;

        BlockCheck(long block, List<Operation> ops, Function<Operation, String> describe, List<Violation> out) {
            this.block = block;
            this.ops = ops;
            this.describe = describe;
            this.out = out;
        }

        void run() {
            for (Operation o : ops) {
                if (o.isWrite()) {
                    quietFrom = Math.max(quietFrom, o.outcome() == Outcome.OK ? o.completed() : o.invoked());
                }
            }
            Map<BlockVersion, Cluster> clusters = new LinkedHashMap<>();
            Cluster initial = new Cluster(BlockVersion.INITIAL.toString(), null);
            for (Operation o : ops) {
                if (o.isWrite() && clusters.putIfAbsent(o.written(), new Cluster(o.written().toString(), o)) != null) {
                    throw new IllegalArgumentException("two writes of " + o.written() + " to block " + block
                            + ": values must be unique");
                }
            }
            for (Operation r : ops) {
                if (r.isWrite() || r.outcome() != Outcome.OK) {
                    continue;
                }
                switch (r.observed()) {
                    case Content.Initial i -> initial.reads.add(r);
                    case Content.Corrupt c -> report(Kind.CORRUPT, d(r) + " returned a block corrupt at byte "
                            + c.offset() + " of the block (" + c.why() + ")", r);
                    case Content.Written w when w.block() != block -> report(Kind.FOREIGN, d(r)
                            + " returned a version written for block " + w.block(), r);
                    case Content.Written w -> {
                        Cluster c = clusters.get(w.version());
                        if (c == null) {
                            report(Kind.UNWRITTEN, d(r) + " returned " + w.version()
                                    + ", never written to this block", r);
                        } else if (r.completed() < c.write.invoked()) {
                            report(Kind.READ_BEFORE_WRITE, d(r) + " returned the value of " + d(c.write)
                                    + ", invoked only after the read had completed", r, c.write);
                        } else {
                            c.reads.add(r);
                        }
                    }
                }
            }
            List<Cluster> all = new ArrayList<>(clusters.values());
            if (!initial.reads.isEmpty()) {
                all.add(initial);
            }
            List<Cluster> forward = new ArrayList<>();
            List<Cluster> backward = new ArrayList<>();
            for (Cluster c : all) {
                c.computeZone();
                (c.forward() ? forward : backward).add(c);
            }
            forward.sort(Comparator.comparingLong(c -> c.f));
            checkForwardZonesDisjoint(forward);
            checkBackwardZonesOutsideForward(forward, backward);
        }

        /** Sorted by f, each forward zone is compared with the earlier one reaching furthest. */
        private void checkForwardZonesDisjoint(List<Cluster> forward) {
            Cluster reach = null;
            for (Cluster c : forward) {
                if (reach != null && c.f < reach.s) {
                    resurrection(reach, c);
                }
                if (reach == null || c.s > reach.s) {
                    reach = c;
                }
            }
        }

        private void checkBackwardZonesOutsideForward(List<Cluster> forward, List<Cluster> backward) {
            long[] fs = new long[forward.size()];
            Cluster[] reach = new Cluster[forward.size()];
            for (int i = 0; i < fs.length; i++) {
                Cluster c = forward.get(i);
                fs[i] = c.f;
                reach[i] = i > 0 && reach[i - 1].s >= c.s ? reach[i - 1] : c;
            }
            for (Cluster b : backward) {
                int n = lowerCount(fs, b.s); // forward zones with f < s_b
                if (n > 0 && reach[n - 1].s > b.f) {
                    inside(b, reach[n - 1]);
                }
            }
        }

        /** How many of the sorted {@code fs} are below {@code x}. */
        private static int lowerCount(long[] fs, long x) {
            int i = Arrays.binarySearch(fs, x);
            if (i < 0) {
                return -i - 1;
            }
            while (i > 0 && fs[i - 1] == x) {
                i--;
            }
            return i;
        }

        /** Forward zones of {@code a} and {@code c} overlap, {@code a.f <= c.f < a.s}. */
        private void resurrection(Cluster a, Cluster c) {
            report(Kind.RESURRECTION, d(a.last) + " returned " + a.value + " after " + d(c.first) + " had made it "
                    + c.value + ", which " + d(c.last) + " returned after " + established(a) + " had made it "
                    + a.value, a.first, c.first, a.last, c.last);
        }

        /** Backward zone of {@code b} inside the forward zone of {@code a}. */
        private void inside(Cluster b, Cluster a) {
            Operation stale = a.last; // always a read: the write of a forward cluster is invoked by f
            Operation newer = b.reads.stream().filter(r -> r.completed() < stale.invoked())
                    .min(Comparator.comparingLong(Operation::completed)).orElse(null);
            if (newer != null) {
                report(Kind.NEW_OLD_INVERSION, d(newer) + " returned " + b.value + ", which took effect after "
                        + established(a) + " had made it " + a.value + ", yet " + d(stale)
                        + ", begun after that read completed, returned " + a.value + " again", a.first, newer, stale);
                return;
            }
            boolean quiet = stale.invoked() > quietFrom;
            String between = b.first == b.last ? d(b.first) + " ran wholly after " + established(a) + " had made it "
                    + a.value + " and before the read"
                    : d(b.first) + " completed before the read began, and " + d(b.last) + " (of " + b.value
                            + ") began after " + established(a) + " had made it " + a.value;
            report(quiet ? Kind.LOST_WRITE : Kind.STALE_READ, d(stale) + " returned " + a.value + ", though "
                    + between, a.first, b.first, b.last, stale);
        }

        private String established(Cluster a) {
            return a.first == null ? "the start" : d(a.first);
        }

        private String d(Operation o) {
            return describe.apply(o);
        }

        private void report(Kind kind, String what, Operation... involved) {
            List<Operation> list = new ArrayList<>();
            for (Operation o : involved) {
                if (o != null && !list.contains(o)) {
                    list.add(o);
                }
            }
            out.add(new Violation(block, kind, what, List.copyOf(list)));
        }
    }

    /** Counts of violations by kind, for test messages and assertions. */
    public static Map<Kind, Integer> kinds(Result result) {
        Map<Kind, Integer> n = new HashMap<>();
        for (Violation v : result.violations()) {
            n.merge(v.kind(), 1, Integer::sum);
        }
        return n;
    }
}
