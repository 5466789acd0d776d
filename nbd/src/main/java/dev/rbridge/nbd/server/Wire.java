package dev.rbridge.nbd.server;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

/**
 * What a connection reads requests from and writes replies to: the socket itself, or TLS over it ({@link TlsWire}).
 * Blocking during the handshake, non-blocking in transmission, as the socket is. Reads come from the connection's
 * thread only; writes from whichever thread holds the {@link Outbox}'s writing role, or the connection's thread during
 * the handshake.
 */
interface Wire {
    /** As {@link SocketChannel#read(ByteBuffer)}: bytes read, 0 when none are ready (non-blocking), -1 at the end. */
    int read(ByteBuffer dst) throws IOException;

    /** As a gathering write: the bytes of {@code srcs} taken, 0 when the socket takes nothing now. */
    long write(ByteBuffer[] srcs, int offset, int length) throws IOException;

    /**
     * Sends what was taken but could not go out yet (TLS records); true when nothing is left waiting, false when the
     * socket is full and this must be called again once it is writable.
     */
    default boolean flush() throws IOException {
        return true;
    }

    /** Bytes were taken that have not gone out yet: the socket must be watched for writability. */
    default boolean pendingOutput() {
        return false;
    }

    /** The plain socket. */
    static Wire of(SocketChannel channel) {
        return new Wire() {
            @Override
            public int read(ByteBuffer dst) throws IOException {
                return channel.read(dst);
            }

            @Override
            public long write(ByteBuffer[] srcs, int offset, int length) throws IOException {
                return channel.write(srcs, offset, length);
            }
        };
    }
}
