package dev.rbridge.nbd.protocol;

import java.nio.ByteBuffer;

/**
 * One transmission-phase request. {@code length} is unsigned 32-bit widened to long. For NBD_CMD_WRITE,
 * {@code payload} holds the data (a buffer from the decoder's {@link PayloadAllocator}, owned by whoever handles the
 * request from now on), unless the payload exceeded the decoder's limit: then it was read and discarded,
 * {@code payload} is null and {@code payloadDiscarded} is true so the server can answer with an error and go on.
 */
public record Request(int flags, int type, long handle, long offset, long length, ByteBuffer payload,
        boolean payloadDiscarded) {

    public boolean hasFlag(int flag) {
        return (flags & flag) != 0;
    }

    @Override
    public String toString() {
        return Nbd.commandName(type) + "(handle=0x" + Long.toHexString(handle) + ", offset="
                + Long.toUnsignedString(offset)
                + ", length=" + length + ", flags=0x" + Integer.toHexString(flags)
                + (payloadDiscarded ? ", payload discarded" : "")
                + ")";
    }
}
