package dev.rbridge.nbd.protocol;

import java.nio.ByteBuffer;

/** Gives the request decoder a buffer for a WRITE payload, so payloads land in memory the server pools. */
@FunctionalInterface
public interface PayloadAllocator {
    /** A buffer with position 0 and limit exactly {@code length}, or null to be asked again later. */
    ByteBuffer allocate(int length);

    PayloadAllocator HEAP = ByteBuffer::allocate;
}
