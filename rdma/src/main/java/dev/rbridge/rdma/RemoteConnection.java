package dev.rbridge.rdma;

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

    CompletableFuture<List<RegionInfo>> list();

    CompletableFuture<Void> release(RegionDescriptor region);

    CompletableFuture<Void> read(RegionDescriptor region, long offset, MemorySegment dst);

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
