package dev.rbridge.common.tls;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ByteChannel;
import java.nio.channels.GatheringByteChannel;
import java.nio.channels.SocketChannel;

/**
 * The byte stream of one connection: the socket itself ({@link PlainSocketStream}), or TLS over it. What the NBD
 * server's connections (before and after STARTTLS) and both ends of the memserver wire read and write through; each
 * adds what its own I/O needs (the NBD server's non-blocking flushing, the memserver reader's polling). Blocking or not
 * as the socket is. Closing it closes the socket, which wakes a thread blocked in either direction.
 */
public interface SocketStream extends ByteChannel, GatheringByteChannel {
    /** The socket under it: for socket options, shutting down and closing. */
    SocketChannel socket();

    /** For logs: "clear", or the TLS protocol, cipher suite and who the peer proved to be. */
    String describe();

    /** As a gathering write of {@code src} alone. */
    @Override
    default int write(ByteBuffer src) throws IOException {
        return (int) write(new ByteBuffer[]{src}, 0, 1);
    }

    @Override
    default long write(ByteBuffer[] srcs) throws IOException {
        return write(srcs, 0, srcs.length);
    }

    @Override
    default boolean isOpen() {
        return socket().isOpen();
    }

    @Override
    default void close() throws IOException {
        socket().close();
    }
}
