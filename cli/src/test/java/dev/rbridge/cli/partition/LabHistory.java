package dev.rbridge.cli.partition;

import dev.rbridge.cli.history.BlockTarget;
import dev.rbridge.cli.history.BlockVersion;
import dev.rbridge.cli.history.History;
import dev.rbridge.cli.history.LibnbdTarget;
import dev.rbridge.cli.history.RegisterChecker;

import java.io.IOException;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * The history checker ({@code dev.rbridge.cli.history}) in a {@link PartitionLab}: NBD clients (libnbd) that run in a
 * lab node, so every request crosses the lab's wire, and a read pass of its own after a workload's.
 */
final class LabHistory {
    private LabHistory() {}

    /** libnbd clients of {@code uri} in {@code node} ({@code ip netns exec}), with LibnbdTarget's deadline. */
    static BlockTarget.Connector connector(PartitionLab lab, String node, String uri) {
        return LibnbdTarget.connector(uri, LibnbdTarget.DEFAULT_TIMEOUT, lab.command(node));
    }

    /**
     * Reads blocks {@code first} to {@code first + count - 1} once each over one new connection, recording each read
     * in {@code history}; returns how many could not be read.
     */
    static long readPass(History history, BlockTarget.Connector connector, long first, long count, int blockBytes)
            throws IOException {
        long unread = 0;
        try (BlockTarget target = connector.connect()) {
            for (long b = first; b < first + count; b++) {
                History.Pending p = history.invokeRead(b);
                try {
                    p.ok(BlockVersion.decode(target.read(b * blockBytes, blockBytes)));
                } catch (IOException e) {
                    p.failed(String.valueOf(e.getMessage()));
                    unread++;
                }
            }
        }
        return unread;
    }

    /**
     * For the first {@code max} violations: every operation on its block that overlaps the time of the operations
     * involved, widened by 20 ms each way, one line each in invocation order, so a failure shows what ran around it.
     */
    static String excerpt(List<History.Operation> operations, RegisterChecker.Result result,
            Function<History.Operation, String> describe, int max) {
        long margin = TimeUnit.MILLISECONDS.toNanos(20);
        StringBuilder b = new StringBuilder();
        for (RegisterChecker.Violation v : result.violations().subList(0, Math.min(max, result.violations().size()))) {
            long from = Long.MAX_VALUE;
            long to = Long.MIN_VALUE;
            for (History.Operation o : v.operations()) {
                from = Math.min(from, o.invoked());
                to = Math.max(to, o.completed() < 0 ? o.invoked() : o.completed());
            }
            b.append("around ").append(v.line()).append('\n');
            for (History.Operation o : operations) {
                long end = o.completed() < 0 ? Long.MAX_VALUE : o.completed();
                if (o.block() == v.block() && o.invoked() <= to + margin && end >= from - margin) {
                    b.append("  ").append(describe.apply(o)).append('\n');
                }
            }
        }
        return b.toString();
    }
}
