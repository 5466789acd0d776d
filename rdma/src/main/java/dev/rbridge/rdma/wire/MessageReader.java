package dev.rbridge.rdma.wire;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ReadableByteChannel;

/**
 * Reads messages of the control protocol from a blocking channel: the decoder takes each where it lies in an input
 * buffer of fixed size, which is refilled with whatever the channel has whenever the decoder needs more. A
 * transport that must do something before it blocks for input (send queued replies, poll first) or read less than the
 * buffer holds uses {@link #readMore} alone. One thread's at a time.
 */
public final class MessageReader {
    private final ReadableByteChannel channel;
    private final MessageDecoder decoder;
    private final ByteBuffer in;

    /** {@code in}: little-endian and in read mode; its unread bytes, if any, are the stream's next. */
    public MessageReader(ReadableByteChannel channel, MessageDecoder decoder, ByteBuffer in) {
        this.channel = channel;
        this.decoder = decoder;
        this.in = in;
    }

    /** The next message (its data, if any, left in the input for the transport to move); EOF when the channel ended. */
    public Message next() throws IOException, MalformedMessageException {
        Message m;
        while ((m = decoder.next(in)) == null) {
            readMore(channel, in, Integer.MAX_VALUE);
        }
        return m;
    }

    /**
     * One read from {@code ch} appended to the unread bytes of {@code in} (kept in read mode), reading no more than
     * makes {@code upTo} unread bytes: a transport reads just the next header that way when the data after it had
     * better go straight from the socket to memory. EOF at the end of the stream.
     */
    public static void readMore(ReadableByteChannel ch, ByteBuffer in, int upTo) throws IOException {
        in.compact();
        int r;
        try {
            if (upTo < in.remaining() + in.position() && upTo > in.position()) {
                in.limit(upTo);
            }
            r = ch.read(in);
        } finally {
            in.limit(in.capacity());
            in.flip();
        }
        if (r < 0) {
            throw new EOFException();
        }
    }
}
