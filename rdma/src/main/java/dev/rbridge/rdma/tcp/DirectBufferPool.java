package dev.rbridge.rdma.tcp;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayDeque;

/**
 * A listener's direct buffers of one size, kept for the next connection when one ends. A direct buffer's memory goes
 * back only when the GC collects the buffer, and when the direct memory limit is reached the JDK calls a full GC and
 * sleeps before it gives up: clients that come and go would otherwise pile up garbage until such a pause stalls every
 * connection. Reusing them keeps the memory a memserver holds to what its connections use plus a few idle ones.
 */
final class DirectBufferPool {
    private final int size;
    private final int maxIdle;
    private final ArrayDeque<ByteBuffer> idle = new ArrayDeque<>();

    DirectBufferPool(int size, int maxIdle) {
        this.size = size;
        this.maxIdle = maxIdle;
    }

    /** A buffer of the pool's size, cleared, little-endian; made if none is idle (OutOfMemoryError if no memory). */
    ByteBuffer take() {
        ByteBuffer b;
        synchronized (this) {
            b = idle.pollFirst();
        }
        return b != null ? b.clear() : ByteBuffer.allocateDirect(size).order(ByteOrder.LITTLE_ENDIAN);
    }

    /** Gives a buffer back; nobody may use it any more. Kept unless enough are idle already. */
    void give(ByteBuffer b) {
        if (b == null || !b.isDirect() || b.capacity() != size) {
            return;
        }
        synchronized (this) {
            if (idle.size() < maxIdle) {
                idle.addFirst(b);
            }
        }
    }

    synchronized int idle() {
        return idle.size();
    }
}
