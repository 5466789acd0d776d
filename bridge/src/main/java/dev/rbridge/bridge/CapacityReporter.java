package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.rdma.RemoteConnection;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.Collection;
import java.util.List;

/**
 * Capacity accounting: what the volumes need if every byte is written against what the memservers up lend ({@link
 * Bridge.Commitment}), said in the log at start and whenever it crosses the line as memservers come and go; and the
 * memservers' capacities, asked again by the health duty.
 */
final class CapacityReporter {
    /** Logged as the bridge, as before these parts had classes of their own. */
    private static final Logger log = LoggerFactory.getLogger(Bridge.class);

    private final Collection<Volume> volumes;
    private final List<MemserverLink> links;
    /** Whether the last check found the volumes over-committed; null before the first. */
    private volatile Boolean overcommitted;

    CapacityReporter(Collection<Volume> volumes, List<MemserverLink> links) {
        this.volumes = volumes;
        this.links = links;
    }

    Bridge.Commitment commitment() {
        long provisioned = 0;
        for (Volume v : volumes) {
            provisioned += v.spec().size() * v.spec().replicas();
        }
        long live = 0;
        int up = 0;
        for (MemserverLink l : links) {
            if (l.connection() != null) {
                live += l.capacityBytes();
                up++;
            }
        }
        return new Bridge.Commitment(provisioned, live, up);
    }

    /**
     * Logs the commitment at start ({@code always}) and whenever it crosses the line as memservers come and go: WARN
     * when over-committed, INFO otherwise.
     */
    void check(boolean always) {
        Bridge.Commitment c = commitment();
        Boolean before = overcommitted;
        overcommitted = c.overcommitted();
        if (!always && before != null && before == c.overcommitted()) {
            return;
        }
        if (c.overcommitted()) {
            log.warn("over-committed: the volumes need {} bytes when full (size x replicas) but the {} memserver(s)"
                    + " up lend {}; writes to slabs not yet allocated will fail ENOSPC once they are full:"
                    + " add memservers or capacity, or fewer or smaller volumes", c.provisionedBytes(),
                    c.memserversUp(), c.liveCapacityBytes());
        } else {
            log.info("capacity: the volumes need {} bytes when full (size x replicas); the {} memserver(s) up lend {}",
                    c.provisionedBytes(), c.memserversUp(), c.liveCapacityBytes());
        }
    }

    /**
     * A memserver came or went: the commitment is said if it crossed the line. Nothing before the first check: at
     * start-up the check comes once everything is attached.
     */
    void recheck() {
        if (overcommitted != null) {
            check(false);
        }
    }

    /** Asks {@code l} (up on {@code c}) for its capacity and free bytes again. */
    void refresh(MemserverLink l, RemoteConnection c) {
        c.info().thenAccept(i -> l.capacity(i.capacityBytes(), i.freeBytes()));
    }
}
