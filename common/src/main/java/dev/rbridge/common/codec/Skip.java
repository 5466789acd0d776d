package dev.rbridge.common.codec;

import java.nio.ByteBuffer;

/**
 * Bytes of input to drop as they come, from input that may be split anywhere: a refused message's payload, which a
 * decoder passes over without buffering it. The NBD request decoder and the control protocol's decoder keep one each.
 */
public final class Skip {
    private long remaining;

    /** Starts dropping the next {@code bytes} of input. */
    public void start(long bytes) {
        if (bytes < 0) {
            throw new IllegalArgumentException("cannot skip " + bytes + " bytes");
        }
        remaining = bytes;
    }

    /** Drops what {@code in} holds of the bytes still to skip; true once all of them are dropped. */
    public boolean drop(ByteBuffer in) {
        int n = (int) Math.min(in.remaining(), remaining);
        in.position(in.position() + n);
        remaining -= n;
        return remaining == 0;
    }

    /** Bytes still to skip. */
    public long remaining() {
        return remaining;
    }
}
