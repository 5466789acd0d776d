package dev.rbridge.memserver;

import dev.rbridge.memory.WrittenPages;
import dev.rbridge.rdma.RegionService;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A pinned range of one region; closing it (once) drops the pin, and a device's hold on the region. Used by one
 * thread at a time (a transfer's, or a registration handed on with a happens-before).
 */
final class RegionPin implements RegionService.Pin {
    final Region region;
    /** The connection whose operation this is; the pin is in its {@link ClientSession#pins} while open. */
    final ClientSession client;
    /** In {@link ClientSession#pins}, and its neighbours there: guarded by that {@link PinsInFlight}. */
    boolean inFlight;
    RegionPin olderInFlight;
    RegionPin newerInFlight;
    private final long offset;
    private final MemorySegment slice;
    private boolean closed;
    private boolean deviceHolds;
    /** Set once closed, for a drained takeover looking on from another thread. */
    private volatile boolean ended;
    /** Made only when a drained takeover waits for this pin (rarely): counted down once closed. */
    private volatile CountDownLatch waiter;

    RegionPin(Region region, ClientSession client, long offset, MemorySegment slice) {
        this.region = region;
        this.client = client;
        this.offset = offset;
        this.slice = slice;
    }

    /** Waits until closed or {@code deadline} (System.nanoTime); whether it closed. */
    boolean awaitClosed(long deadline) {
        try {
            CountDownLatch w;
            synchronized (this) {
                w = waiter;
                if (w == null) {
                    waiter = w = new CountDownLatch(1);
                }
            }
            // close() sets ended before it looks at waiter, and this set waiter before it looks at ended (both
            // volatile): either close sees the latch and counts it down, or this sees the pin ended.
            return ended || w.await(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /**
     * A device's registration holds this pin from now on (ucx): the transport withdraws it (INVALIDATE, and
     * deregistration) when keys rotate, so it is no operation in flight for a drained takeover to wait for.
     */
    private void handedToDevice() {
        client.pins.remove(this);
    }

    public MemorySegment memory() {
        return slice;
    }

    @Override
    public void wrote() {
        region.memory.writtenPages().mark(offset, slice.byteSize());
    }

    @Override
    public void runs(RegionService.RunVisitor visitor) {
        WrittenPages written = region.memory.writtenPages();
        long end = offset + slice.byteSize();
        for (long at = offset; at < end;) {
            long runEnd = written.runEnd(at, end);
            visitor.run(at - offset, runEnd - at, written.isWritten(at));
            at = runEnd;
        }
    }

    @Override
    public void exposed() {
        handedToDevice();
        region.exposed();
    }

    @Override
    public void heldByDevice() {
        handedToDevice();
        if (!deviceHolds && !closed) {
            deviceHolds = true;
            region.heldByDevice();
        }
    }

    public void close() {
        if (!closed) {
            closed = true;
            client.pins.remove(this);
            if (deviceHolds) {
                region.releasedByDevice();
            }
            region.unpin();
            ended = true;
            CountDownLatch w = waiter;
            if (w != null) {
                w.countDown();
            }
        }
    }
}
