package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.wire.MalformedMessageException;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageDecoder;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;

/**
 * Reads the messages of a ucx-provider control connection, either end, from its blocking socket through a heap
 * buffer of fixed size; the decoder takes each message where it lies. One thread's only.
 */
final class MessageReader {
    private final SocketChannel channel;
    private final MessageDecoder decoder;
    private final ByteBuffer in;

    MessageReader(SocketChannel channel, MessageDecoder decoder, int bufferBytes) {
        this.channel = channel;
        this.decoder = decoder;
        this.in = ByteBuffer.allocate(bufferBytes).order(ByteOrder.LITTLE_ENDIAN).flip();
    }

    /** The next message, reading as much as the socket has whenever the decoder needs more; EOF when it closed. */
    Message next() throws IOException, MalformedMessageException {
        Message m;
        while ((m = decoder.next(in)) == null) {
            in.compact();
            int r;
            try {
                r = channel.read(in);
            } finally {
                in.flip();
            }
            if (r < 0) {
                throw new EOFException();
            }
        }
        return m;
    }
}
