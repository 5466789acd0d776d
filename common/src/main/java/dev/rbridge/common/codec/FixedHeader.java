package dev.rbridge.common.codec;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * Gathers a header of fixed size from input that may be split anywhere: the first step of the NBD request decoder and
 * of the control protocol's decoder. It holds the bytes of a partial header between calls and never consumes a byte
 * after the header.
 *
 * <p>Whoever reads the header it hands out reads every field before checking any: then a header refused (a bad magic)
 * has consumed exactly its own bytes from the input, whether it arrived whole or in pieces.
 */
public final class FixedHeader {
    /** Where a partial header is gathered. */
    private final ByteBuffer gathering;
    /** The same bytes, handed out to be read once a header is whole. */
    private final ByteBuffer whole;

    /** A header of {@code length} bytes, whose fields are in {@code order}. */
    public FixedHeader(int length, ByteOrder order) {
        gathering = ByteBuffer.allocate(length).order(order);
        whole = gathering.duplicate().order(order);
    }

    /**
     * The next header once all of its bytes have come, or null when {@code in} ran dry first (what it had is kept for
     * the next call). When {@code in} holds a whole header, in this header's byte order, and no part of one came before,
     * the header is read where it lies: {@code in} itself is returned, at the header's first byte, and reading the
     * header consumes it. Otherwise the bytes are gathered (consumed from {@code in}) and a buffer holding exactly the
     * header is returned, valid until the next call.
     */
    public ByteBuffer next(ByteBuffer in) {
        if (gathering.position() == 0 && in.remaining() >= gathering.capacity() && in.order() == gathering.order()) {
            return in;
        }
        if (!Gather.into(gathering, in)) {
            return null;
        }
        gathering.clear();
        return whole.clear();
    }

    /** Part of a header has come and the rest has not: the input is not at a header's start. */
    public boolean partial() {
        return gathering.position() > 0;
    }
}
