package dev.rbridge.nbd.server;

import dev.rbridge.nbd.device.BlockDevice;
import dev.rbridge.nbd.device.Extent;
import dev.rbridge.nbd.device.SparseMemoryDevice;

import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.LongUnaryOperator;

/**
 * A real sparse memory device whose operations complete later, on another thread, after a delay chosen per offset:
 * it stands in for a remote backend so tests see replies leave out of order and from foreign threads.
 */
final class DelayedCompletionDevice implements BlockDevice {
    private final SparseMemoryDevice inner;
    private final LongUnaryOperator delayMillisForOffset;
    private final AtomicInteger arrived = new AtomicInteger();
    private final ScheduledExecutorService completer = Executors.newScheduledThreadPool(2, r -> {
        Thread t = new Thread(r, "delayed-device");
        t.setDaemon(true);
        return t;
    });

    DelayedCompletionDevice(long size, LongUnaryOperator delayMillisForOffset) {
        this.inner = new SparseMemoryDevice(size);
        this.delayMillisForOffset = delayMillisForOffset;
    }

    /** How many operations the server has handed to this device so far (a test awaits them instead of sleeping). */
    int arrived() {
        return arrived.get();
    }

    private <T> CompletableFuture<T> later(long offset, java.util.function.Supplier<CompletableFuture<T>> op) {
        arrived.incrementAndGet();
        CompletableFuture<T> f = new CompletableFuture<>();
        completer.schedule(() -> op.get().whenComplete((v, t) -> {
            if (t != null) {
                f.completeExceptionally(t);
            } else {
                f.complete(v);
            }
        }), delayMillisForOffset.applyAsLong(offset), TimeUnit.MILLISECONDS);
        return f;
    }

    public long size() {
        return inner.size();
    }

    public CompletableFuture<Void> read(long offset, ByteBuffer dst) {
        return later(offset, () -> inner.read(offset, dst));
    }

    public CompletableFuture<Void> write(long offset, ByteBuffer src, boolean fua) {
        return later(offset, () -> inner.write(offset, src, fua));
    }

    public CompletableFuture<Void> flush() {
        return later(0, inner::flush);
    }

    public CompletableFuture<Void> trim(long offset, long length, boolean fua) {
        return later(offset, () -> inner.trim(offset, length, fua));
    }

    public CompletableFuture<Void> writeZeroes(long offset, long length, boolean mayPunchHole, boolean fua) {
        return later(offset, () -> inner.writeZeroes(offset, length, mayPunchHole, fua));
    }

    public CompletableFuture<List<Extent>> blockStatus(long offset, long length, int maxExtents) {
        return later(offset, () -> inner.blockStatus(offset, length, maxExtents));
    }

    public void close() {
        completer.shutdownNow();
        inner.close();
    }
}
