package dev.rbridge.rdma.wire;

import java.nio.ByteBuffer;
import java.util.Arrays;

/**
 * A byte string field of a {@link Message} (a UCX worker address, a nonce, a proof, a packed remote key): an immutable
 * copy, made when the message is, so neither the buffer it came from nor whoever reads it can change it. Equal by
 * content. Shown by its length only, never its bytes: nonces, proofs and remote keys are secrets or noise in a log.
 */
public final class WireBytes {
    /** No bytes: the worker address of a {@link Message.UcxConnect} from a client that predates sending one. */
    public static final WireBytes EMPTY = new WireBytes(new byte[0]);

    private final byte[] bytes;

    private WireBytes(byte[] bytes) {
        this.bytes = bytes;
    }

    /** A copy of {@code b}'s remaining bytes; {@code b}'s position is left where it was. */
    public static WireBytes copyOf(ByteBuffer b) {
        byte[] copy = new byte[b.remaining()];
        b.get(b.position(), copy);
        return new WireBytes(copy);
    }

    /** A copy of {@code b}: later changes to the array do not show. */
    public static WireBytes of(byte[] b) {
        return new WireBytes(b.clone());
    }

    /** The bytes as a read-only buffer of their own, at position 0: moving it moves no other view. */
    public ByteBuffer buffer() {
        return ByteBuffer.wrap(bytes).asReadOnlyBuffer();
    }

    /** A copy of the bytes, for an API that takes an array. */
    public byte[] toArray() {
        return bytes.clone();
    }

    public int length() {
        return bytes.length;
    }

    public boolean isEmpty() {
        return bytes.length == 0;
    }

    /** Puts the bytes at {@code dst}'s position and moves it past them. */
    void putTo(ByteBuffer dst) {
        dst.put(bytes);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof WireBytes w && Arrays.equals(bytes, w.bytes);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(bytes);
    }

    /** The length only: the bytes may be a secret. */
    @Override
    public String toString() {
        return "WireBytes[length=" + bytes.length + "]";
    }
}
