package dev.rbridge.rdma.tcp;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;

/** A connected TCP pair on 127.0.0.1 for tests of one socket's behaviour: {@code client} talks to {@code accepted}. */
final class LoopbackPair implements AutoCloseable {
    final SocketChannel client;
    final SocketChannel accepted;
    private final ServerSocketChannel listener;

    LoopbackPair() throws IOException {
        listener = ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0));
        client = SocketChannel.open(listener.getLocalAddress());
        accepted = listener.accept();
    }

    @Override
    public void close() throws IOException {
        try (listener; accepted; client) {
            // closes all three, and reports the first failure
        }
    }
}
