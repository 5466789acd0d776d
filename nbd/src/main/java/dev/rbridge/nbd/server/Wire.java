package dev.rbridge.nbd.server;

import dev.rbridge.common.tls.PlainSocketStream;
import dev.rbridge.common.tls.SocketStream;

import java.io.IOException;
import java.nio.channels.SocketChannel;

/**
 * What a connection reads requests from and writes replies to: the socket itself, or TLS over it ({@link TlsWire},
 * {@link PskTlsWire}), as a {@link SocketStream} that can also say what it holds back. Blocking during the handshake,
 * non-blocking in transmission, as the socket is: a read returns 0 when no byte is ready, a gathering write the bytes
 * the socket took now. Reads come from the connection's thread only; writes from whichever thread holds the {@link
 * Outbox}'s writing role, or the connection's thread during the handshake.
 */
interface Wire extends SocketStream {
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
        return new Plain(channel);
    }

    /** {@link #of}: every call straight to the socket, nothing held back. */
    final class Plain extends PlainSocketStream implements Wire {
        private Plain(SocketChannel channel) {
            super(channel);
        }
    }
}
