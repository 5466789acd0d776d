package dev.rbridge.common.codec;

import java.nio.ByteBuffer;

/** Gathering a buffer's worth of input that may be split anywhere: a header ({@link FixedHeader}), a payload. */
public final class Gather {
    private Gather() {}

    /**
     * Moves as much of {@code in} as {@code dst} has room for, advancing both positions; true once {@code dst} is full.
     * Never consumes a byte of {@code in} beyond what fits.
     */
    public static boolean into(ByteBuffer dst, ByteBuffer in) {
        int n = Math.min(in.remaining(), dst.remaining());
        dst.put(dst.position(), in, in.position(), n);
        dst.position(dst.position() + n);
        in.position(in.position() + n);
        return !dst.hasRemaining();
    }
}
