package dev.rbridge.rdma.tcp;

import java.io.EOFException;
import java.io.IOException;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

/** The tcp provider's socket settings and the reads and writes both its ends share. */
final class TcpSockets {
    private TcpSockets() {}

    /** Data at least this large is a large transfer: the read after it fetches only the next header. */
    static final int LARGE = 64 << 10;

    /** Socket buffer size on both ends: room for several large transfers in flight without stalls. */
    static final int SOCKET_BUFFER = 4 << 20;

    static void tune(SocketChannel ch) throws IOException {
        ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
        // A peer whose machine vanished without a FIN or RST is found by the kernel eventually, freeing its thread.
        ch.setOption(StandardSocketOptions.SO_KEEPALIVE, true);
        ch.setOption(StandardSocketOptions.SO_SNDBUF, SOCKET_BUFFER);
        ch.setOption(StandardSocketOptions.SO_RCVBUF, SOCKET_BUFFER);
    }

    static void readFully(java.nio.channels.ReadableByteChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            if (ch.read(b) < 0) {
                throw new EOFException();
            }
        }
    }
}
