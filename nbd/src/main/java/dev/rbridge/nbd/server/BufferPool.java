package dev.rbridge.nbd.server;

import java.nio.ByteBuffer;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Direct buffers for request payloads and read data, in power-of-two size classes from 4 KiB to the largest payload.
 * Allocating a direct buffer zeroes it and takes a global lock, so reuse matters at 100k requests per second.
 * At most {@code retainBytes} are kept idle; beyond that, released buffers are left to the GC.
 */
public final class BufferPool {
    private static final int MIN_SHIFT = 12;

    private final ConcurrentLinkedQueue<ByteBuffer>[] classes;
    private final long retainBytes;
    private final AtomicLong idleBytes = new AtomicLong();

    @SuppressWarnings("unchecked")
    public BufferPool(int maxBufferSize, long retainBytes) {
        int maxShift = 32 - Integer.numberOfLeadingZeros(Math.max(maxBufferSize, 1 << MIN_SHIFT) - 1);
        this.classes = new ConcurrentLinkedQueue[maxShift - MIN_SHIFT + 1];
        for (int i = 0; i < classes.length; i++) {
            classes[i] = new ConcurrentLinkedQueue<>();
        }
        this.retainBytes = retainBytes;
    }

    /** A direct buffer with position 0 and limit {@code length}. */
    public ByteBuffer acquire(int length) {
        int index = classIndex(length);
        if (index >= classes.length) {
            return ByteBuffer.allocateDirect(length); // larger than any pooled class: not kept after release
        }
        ByteBuffer b = classes[index].poll();
        if (b == null) {
            b = ByteBuffer.allocateDirect(1 << (index + MIN_SHIFT));
        } else {
            idleBytes.addAndGet(-b.capacity());
        }
        return b.clear().limit(length);
    }

    /** The capacity of the buffer {@link #acquire} returns for {@code length}: what it holds in memory. */
    public int capacityFor(int length) {
        int index = classIndex(length);
        return index >= classes.length ? length : 1 << (index + MIN_SHIFT);
    }

    public void release(ByteBuffer b) {
        if (b == null || !b.isDirect()) {
            return;
        }
        int index = classIndex(b.capacity());
        if (index >= classes.length || b.capacity() != 1 << (index + MIN_SHIFT)) {
            return;
        }
        if (idleBytes.addAndGet(b.capacity()) > retainBytes) {
            idleBytes.addAndGet(-b.capacity());
            return;
        }
        classes[index].offer(b);
    }

    public long idleBytes() {
        return idleBytes.get();
    }

    private static int classIndex(int length) {
        if (length <= 1 << MIN_SHIFT) {
            return 0;
        }
        return 32 - Integer.numberOfLeadingZeros(length - 1) - MIN_SHIFT;
    }
}
