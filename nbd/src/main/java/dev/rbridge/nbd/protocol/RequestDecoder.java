package dev.rbridge.nbd.protocol;

import dev.rbridge.common.codec.FixedHeader;
import dev.rbridge.common.codec.Gather;
import dev.rbridge.common.codec.Skip;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * Decodes transmission-phase requests (compact 28-byte headers; extended headers would add a second header
 * length and a 64-bit length field in {@link #decodeHeader}, nothing else changes). A pure state machine: input may be
 * split anywhere, and only the returned request's bytes are consumed.
 *
 * <p>WRITE payloads are gathered into a buffer from the {@link PayloadAllocator}. To spare a copy of large payloads,
 * a caller may fill {@link #payloadSink()} straight from its source and then call {@link #next} again. An allocator
 * may refuse for now (a memory budget): the decoder then consumes nothing more, {@link #awaitingBuffer()} is true,
 * and each later {@link #next} asks again.
 */
public final class RequestDecoder {
    private enum State {
        HEADER, AWAIT_BUFFER, PAYLOAD, DISCARD
    }

    private final PayloadAllocator allocator;
    private final int maxPayload;
    private final FixedHeader header = new FixedHeader(Nbd.REQUEST_HEADER_LENGTH, ByteOrder.BIG_ENDIAN);
    private State state = State.HEADER;
    private int flags;
    private int type;
    private long handle;
    private long offset;
    private long length;
    private ByteBuffer payload;
    private final Skip discard = new Skip();

    /**
     * @param maxPayload the largest WRITE payload that is buffered; larger ones are discarded as they arrive and the
     *                   request is returned with {@link Request#payloadDiscarded()} set
     */
    public RequestDecoder(PayloadAllocator allocator, int maxPayload) {
        this.allocator = allocator;
        this.maxPayload = maxPayload;
    }

    /**
     * The next request, or null if {@code in} ran dry first or the allocator refused a buffer for now
     * ({@link #awaitingBuffer}).
     *
     * @throws NbdProtocolException on a bad request magic: the stream can no longer be framed
     */
    public Request next(ByteBuffer in) throws NbdProtocolException {
        while (true) {
            switch (state) {
                case HEADER -> {
                    ByteBuffer h = header.next(in);
                    if (h == null) {
                        return null;
                    }
                    Request r = decodeHeader(h);
                    if (r != null) {
                        return r;
                    }
                }
                case AWAIT_BUFFER -> {
                    payload = allocator.allocate((int) length);
                    if (payload == null) {
                        return null;
                    }
                    state = State.PAYLOAD;
                }
                case PAYLOAD -> {
                    if (!Gather.into(payload, in)) {
                        return null;
                    }
                    ByteBuffer p = payload.flip();
                    payload = null;
                    state = State.HEADER;
                    return new Request(flags, type, handle, offset, length, p, false);
                }
                case DISCARD -> {
                    if (!discard.drop(in)) {
                        return null;
                    }
                    state = State.HEADER;
                    return new Request(flags, type, handle, offset, length, null, true);
                }
            }
        }
    }

    /**
     * While a WRITE payload is being gathered, the buffer it goes into (its position is how much has arrived);
     * otherwise null. Bytes put into it directly count as consumed input.
     */
    public ByteBuffer payloadSink() {
        return state == State.PAYLOAD ? payload : null;
    }

    /** True when a WRITE header is decoded and the allocator has not yet given its payload a buffer. */
    public boolean awaitingBuffer() {
        return state == State.AWAIT_BUFFER;
    }

    /** True when no request is partly decoded, i.e. the stream is at a message boundary. */
    public boolean atBoundary() {
        return state == State.HEADER && !header.partial();
    }

    /** Reads the whole header from {@code h} before checking its magic: a refused header consumes all its bytes. */
    private Request decodeHeader(ByteBuffer h) throws NbdProtocolException {
        int magic = h.getInt();
        flags = Short.toUnsignedInt(h.getShort());
        type = Short.toUnsignedInt(h.getShort());
        handle = h.getLong();
        offset = h.getLong();
        length = Integer.toUnsignedLong(h.getInt());
        if (magic != Nbd.REQUEST_MAGIC) {
            throw new NbdProtocolException("request magic 0x" + Integer.toHexString(magic) + " is not 0x"
                    + Integer.toHexString(Nbd.REQUEST_MAGIC));
        }
        if (type != Nbd.CMD_WRITE || length == 0) {
            return new Request(flags, type, handle, offset, length,
                    type == Nbd.CMD_WRITE ? ByteBuffer.allocate(0) : null,
                    false);
        }
        if (length > maxPayload) {
            discard.start(length);
            state = State.DISCARD;
        } else {
            state = State.AWAIT_BUFFER;
        }
        return null;
    }
}
