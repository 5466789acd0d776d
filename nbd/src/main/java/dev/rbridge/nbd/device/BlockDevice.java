package dev.rbridge.nbd.device;

import dev.rbridge.common.splice.Pipe;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * What an NBD export serves: a byte range with asynchronous operations. The NBD server validates every request
 * (bounds, alignment, flags) before it gets here, so implementations may assume {@code offset + length <= size()}.
 *
 * <p>Completion: a future completes once, normally when the operation is done (a write is visible to every later
 * read on any connection), or exceptionally with a {@link BlockDeviceException} naming the NBD error to return;
 * any other exception is reported as EIO. Implementations may complete on any thread, including the caller's.
 */
public interface BlockDevice extends AutoCloseable {

    long size();

    /** Fills {@code dst} from position to limit with the bytes at {@code offset}. */
    CompletableFuture<Void> read(long offset, ByteBuffer dst);

    /**
     * As {@link #read}, but the device may move the data into {@code pipe} (empty) instead, without passing it through
     * this process's memory: completes with {@code n}; for {@code n > 0} the pipe holds exactly the first {@code n}
     * bytes and {@code dst} the rest, each at its own place. After {@code n == 0} or a failure the pipe may hold bytes
     * of an attempt that failed, and may yet receive some: the caller drops it. This default reads into {@code dst}.
     */
    default CompletableFuture<Integer> readSpliced(long offset, ByteBuffer dst, Pipe pipe) {
        return read(offset, dst).thenApply(v -> 0);
    }

    /** True when {@link #readSpliced} may move data into a pipe at all: otherwise a pipe would only cost. */
    default boolean splicesReads() {
        return false;
    }

    /** True when {@link #readSpliced} would move the data of this READ into a pipe (a cheap guess, not a promise). */
    default boolean splicesRead(long offset, int length) {
        return splicesReads();
    }

    /** Writes {@code src} from position to limit at {@code offset}; the caller keeps {@code src} intact until done. */
    CompletableFuture<Void> write(long offset, ByteBuffer src, boolean fua);

    /** Completes when every write that completed before this call is durable in the device's sense. */
    CompletableFuture<Void> flush();

    /** The range is no longer needed; later reads must return zeroes (this server promises more than NBD requires). */
    CompletableFuture<Void> trim(long offset, long length, boolean fua);

    /**
     * Makes the range read as zeroes.
     *
     * @param mayPunchHole the client allows freeing the storage (no NBD_CMD_FLAG_NO_HOLE)
     */
    CompletableFuture<Void> writeZeroes(long offset, long length, boolean mayPunchHole, boolean fua);

    /** A hint to prefetch; devices that keep everything in memory have nothing to do. */
    default CompletableFuture<Void> cache(long offset, long length) {
        return CompletableFuture.completedFuture(null);
    }

    /**
     * Allocation state of the range from {@code offset}: consecutive extents covering at most {@code length} bytes
     * and at least one byte, at most {@code maxExtents} of them.
     */
    CompletableFuture<List<Extent>> blockStatus(long offset, long length, int maxExtents);

    /** True when {@link #writeZeroes} is much cheaper than writing zeroes (answers NBD_CMD_FLAG_FAST_ZERO). */
    default boolean fastZero() {
        return false;
    }

    /**
     * True when a flush on one connection covers writes completed on every connection, which is what
     * NBD_FLAG_CAN_MULTI_CONN promises the client.
     */
    default boolean multiConnSafe() {
        return true;
    }

    @Override
    void close();
}
