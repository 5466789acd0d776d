package dev.rbridge.cli.partition;

import dev.rbridge.cli.history.BlockTarget;
import dev.rbridge.cli.history.BlockVersion;
import dev.rbridge.cli.history.History;
import dev.rbridge.cli.history.LibnbdTarget;

import java.io.IOException;

/**
 * The history checker ({@code dev.rbridge.cli.history}) in a {@link PartitionLab}: NBD clients (libnbd) that run in a
 * lab node, so every request crosses the lab's wire, and a read pass of its own after a workload's.
 */
final class LabHistory {
    private LabHistory() {
    }

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
}
