package dev.rbridge.bridge;

import dev.rbridge.bridge.LeaseKeeper.LeaseWait;
import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Replica;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;

import java.util.Map;

/**
 * What bringing a memserver up does differently at {@linkplain StartUp start-up} and on a later {@linkplain Reconnect
 * reconnect}; {@link MemserverBringUp#connect} does the steps they share (connect, take every volume's lease, open the
 * volume's regions, mark the memserver up).
 */
sealed interface Attachment permits StartUp, Reconnect {
    /** The memserver refused this bridge's token or protocol version. */
    void refused(MemserverLink l, RemoteMemoryException e);

    /**
     * {@code v}'s lease was granted there ({@code ownersChanged}: another owner had it there since this process's
     * last grant or renewal there).
     */
    void granted(MemserverLink l, Volume v, Lease lease, boolean ownersChanged);

    /**
     * Another connection holds {@code v}'s lease there. Returns to go on without {@code v} on this memserver, or
     * throws: {@link LeaseWait} to try the memserver again later, IllegalStateException to fail the start.
     */
    void leaseHeld(MemserverLink l, RemoteConnection c, Volume v, RemoteMemoryException r) throws LeaseWait;

    /** A region of {@code v} (not a manifest copy) is there, opened as {@code r}. */
    void regionFound(Volume v, Replica r);

    /** The manifest copies the memserver holds, per volume (at most one each; the others were released). */
    void manifestsFound(MemserverLink l, RemoteConnection c, Map<Volume, RegionDescriptor> manifests, long wait)
            throws Exception;
}
