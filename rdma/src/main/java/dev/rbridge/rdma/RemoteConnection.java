package dev.rbridge.rdma;

import dev.rbridge.common.splice.Pipe;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * A client's connection to one memserver. Control plane: {@link #allocate}, {@link #open}, {@link #list},
 * {@link #release}. Data plane: {@link #read}, {@link #write}, {@link #zero}, {@link #flush}, asynchronous with any
 * number in flight.
 *
 * <p>Completion contract: every returned future completes exactly once. A write completes when its bytes are in the
 * memserver's memory and visible to every later read by any client; a read completes when the bytes are in
 * {@code dst}. Failures complete the future with a {@link RemoteMemoryException}. When the peer dies or stops
 * answering, every pending operation fails within the operation timeout ({@code TIMEOUT} or {@code CONNECTION_LOST})
 * and later operations fail at once. The caller keeps {@code src}/{@code dst} alive and untouched until completion.
 * Completions may run on the provider's I/O thread: callbacks must not block.
 */
public interface RemoteConnection extends AutoCloseable {

    ServerInfo server();

    CompletableFuture<RegionDescriptor> allocate(RegionTag tag, long length);

    /** A region this memserver already holds (after a bridge restart), with its key. */
    CompletableFuture<RegionDescriptor> open(long regionId);

    /** Every region the memserver holds, with tag and owner; keys are withheld (0): {@link #open} gives a key. */
    CompletableFuture<List<RegionInfo>> list();

    CompletableFuture<Void> release(RegionDescriptor region);

    /**
     * Changes what a region is tagged with (same volume; slab, replica and generation may change): how the bridge
     * marks the surviving replicas of a slab as the current generation after one failed, and a rebuilt copy as
     * complete. Completes with the descriptor carrying the new tag (same id, length and key). Fails with
     * {@code ACCESS_DENIED} for a wrong key or when another connection holds the volume's lease, {@code BAD_REQUEST}
     * when the tag names another volume, {@code NO_SUCH_REGION} when the region is gone.
     */
    CompletableFuture<RegionDescriptor> retag(RegionDescriptor region, RegionTag tag);

    /**
     * Takes or renews this connection's ownership lease on a volume, for {@code ttl}. Granted when nobody holds it,
     * when this connection already holds it (a renewal), or when the holder's lease expired or its connection ended;
     * otherwise fails with {@code LEASE_HELD}, saying how long the lease has left but not who holds it. The lease
     * belongs to the connection, not to {@code owner}: presenting the holder's owner string from another connection
     * gets {@code LEASE_HELD} too. Every grant but a renewal gives every region of the volume a new access key, so
     * whoever held a key before (a previous owner, anyone who opened a region while the volume was unleased) is
     * fenced off from the data; {@link Lease#tookOver()} says whether it ended someone else's lease, and
     * {@link Lease#ownerChanges()} how often it passed to another owner there. While a lease is
     * held, only its holder's connection may allocate, open, retag or release regions of that volume (others get
     * {@code ACCESS_DENIED}); volumes nobody leases are open to every client. {@code ttl} must be positive and at most
     * {@link Lease#MAX_TTL} ({@code BAD_REQUEST}); renew well within it.
     */
    CompletableFuture<Lease> lease(String volume, String owner, java.time.Duration ttl);

    /**
     * As {@link #lease(String, String, java.time.Duration)}, presenting {@code leaseId}, the id of this client's last
     * grant of the volume on that memserver ({@link Lease#NO_ID} for none): the grant then says whether it continued
     * that lease with nobody else having the volume in between ({@link Lease#continued}). Providers that carry no id
     * ignore it.
     */
    default CompletableFuture<Lease> lease(String volume, String owner, java.time.Duration ttl, long leaseId) {
        return lease(volume, owner, ttl);
    }

    /**
     * Gives a lease this connection holds back (a bridge shutting down cleanly); the next grant is no takeover. Not
     * holding it, or holding it on another connection, is not an error and changes nothing.
     */
    CompletableFuture<Void> unlease(String volume, String owner);

    /** As {@link #unlease(String, String)}, presenting the grant's lease id, which the memserver checks when given. */
    default CompletableFuture<Void> unlease(String volume, String owner, long leaseId) {
        return unlease(volume, owner);
    }

    /** The memserver's current capacity and free bytes. */
    CompletableFuture<ServerInfo> info();

    /**
     * What the memserver is doing (draining or serving). A memserver that predates the question is taken to be
     * serving ({@link ServerState#SERVING}).
     */
    CompletableFuture<ServerState> state();

    CompletableFuture<Void> read(RegionDescriptor region, long offset, MemorySegment dst);

    /**
     * As {@link #read}, but the data may be moved into {@code pipe} instead, without passing through this process's
     * memory: completes with {@code n}, when the pipe then holds the first {@code n} bytes (the pipe must be empty
     * before) and {@code dst} the rest at their own offsets. Providers that cannot splice fill {@code dst} (n = 0), as
     * does this default. After a failure the pipe holds an unknown part of the data.
     */
    default CompletableFuture<Integer> readSpliced(RegionDescriptor region, long offset, MemorySegment dst,
            Pipe pipe) {
        return read(region, offset, dst).thenApply(v -> 0);
    }

    CompletableFuture<Void> write(RegionDescriptor region, long offset, MemorySegment src);

    CompletableFuture<Void> zero(RegionDescriptor region, long offset, long length);

    /** Completes when every operation issued before it on this connection has completed. */
    CompletableFuture<Void> flush();

    ConnectionStats stats();

    boolean isOpen();

    /** Fails everything pending with CONNECTION_LOST and closes. Idempotent. */
    @Override
    void close();
}
