package dev.rbridge.common.tls;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

/**
 * A {@link SocketStream} in clear: every call straight to the socket. Open to extension, so that a wire's own kind of
 * stream (with what that wire adds) can be the plain socket too.
 */
public class PlainSocketStream implements SocketStream {
    private final SocketChannel channel;

    public PlainSocketStream(SocketChannel channel) {
        this.channel = channel;
    }

    @Override
    public final SocketChannel socket() {
        return channel;
    }

    @Override
    public final String describe() {
        return "clear";
    }

    @Override
    public final int read(ByteBuffer dst) throws IOException {
        return channel.read(dst);
    }

    @Override
    public final int write(ByteBuffer src) throws IOException {
        return channel.write(src);
    }

    @Override
    public final long write(ByteBuffer[] srcs, int offset, int length) throws IOException {
        return channel.write(srcs, offset, length);
    }
}
