package dev.rbridge.nbd.server;

import dev.rbridge.common.splice.Pipe;
import dev.rbridge.nbd.device.BlockDevice;
import dev.rbridge.nbd.device.Extent;
import dev.rbridge.nbd.device.SparseMemoryDevice;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A real sparse memory device that answers {@link #readSpliced} as a remote one does: the first half of the data (as
 * much as the pipe takes) goes into the real pipe it is given, the rest into the READ's buffer. The pipe is filled with
 * write(2) from memory rather than spliced from a socket; what the server does with it afterwards is the real path.
 */
final class SplicingMemoryDevice implements BlockDevice {
    private final SparseMemoryDevice inner;
    final AtomicInteger spliced = new AtomicInteger();

    SplicingMemoryDevice(long size) {
        this.inner = new SparseMemoryDevice(size);
    }

    @Override
    public boolean splicesReads() {
        return true;
    }

    @Override
    public CompletableFuture<Integer> readSpliced(long offset, ByteBuffer dst, Pipe pipe) {
        int length = dst.remaining();
        ByteBuffer all = ByteBuffer.allocateDirect(length);
        inner.read(offset, all).join();
        all.flip();
        int half = length / 2;
        try {
            int piped = pipe.write(all.slice(0, half));
            dst.put(dst.position() + piped, all, piped, length - piped);
            spliced.incrementAndGet();
            return CompletableFuture.completedFuture(piped);
        } catch (IOException e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    public long size() {
        return inner.size();
    }

    public CompletableFuture<Void> read(long offset, ByteBuffer dst) {
        return inner.read(offset, dst);
    }

    public CompletableFuture<Void> write(long offset, ByteBuffer src, boolean fua) {
        return inner.write(offset, src, fua);
    }

    public CompletableFuture<Void> flush() {
        return inner.flush();
    }

    public CompletableFuture<Void> trim(long offset, long length, boolean fua) {
        return inner.trim(offset, length, fua);
    }

    public CompletableFuture<Void> writeZeroes(long offset, long length, boolean mayPunchHole, boolean fua) {
        return inner.writeZeroes(offset, length, mayPunchHole, fua);
    }

    public CompletableFuture<List<Extent>> blockStatus(long offset, long length, int maxExtents) {
        return inner.blockStatus(offset, length, maxExtents);
    }

    @Override
    public void close() {
        inner.close();
    }
}
