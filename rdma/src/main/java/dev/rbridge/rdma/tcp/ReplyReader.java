package dev.rbridge.rdma.tcp;

import dev.rbridge.common.splice.Pipe;
import dev.rbridge.common.splice.SocketDescriptor;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.wire.ControlClient;
import dev.rbridge.rdma.wire.MalformedMessageException;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageDecoder;
import dev.rbridge.rdma.wire.MessageReader;
import dev.rbridge.rdma.wire.Protocol;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.ClosedChannelException;
import dev.rbridge.rdma.link.Link;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;

/**
 * The reply-reading role of a tcp client connection: replies are read in order, matched to their calls by id and
 * completed, READ data straight from the socket into the caller's memory. Whoever reads replies (the reader thread,
 * or in caller-driven mode the caller holding the read role, one at a time) uses this; before it blocks for input it
 * writes what requests it safely can, and hands the rest to the flusher ({@link RequestWriter#writeBesideReplies}).
 * Polls briefly before blocking ({@link Spinner}).
 */
final class ReplyReader {
    private static final Logger log = LoggerFactory.getLogger(ReplyReader.class);
    private static final int SPLICE_POLL_MILLIS = 100;

    private final Link channel;
    /** Our descriptor of the socket, for splicing READ data into a call's pipe; null when the link cannot splice. */
    private final SocketDescriptor descriptor;
    private final String peer;
    private final ControlClient control;
    private final RequestWriter writer;
    private final ConnectionStats stats;
    /** The connection's bytes of requests and replies not yet answered (see {@link TcpConnection#busyBytes}). */
    private final AtomicLong busyBytes;
    private final MessageDecoder decoder = MessageDecoder.forClient();
    private final ByteBuffer in = ByteBuffer.allocateDirect(256 << 10).order(ByteOrder.LITTLE_ENDIAN).flip();
    /** Reads the rest of a reply whose header is in: a reply is sent whole, so it is coming. */
    private final MessageReader replies;
    /** The last reply carried large READ data: read only the next header, so that its data skips {@code in}. */
    private boolean afterLarge;
    private final Spinner spinner;
    /** The reader is blocked in a read and cannot step aside (caller-driven mode: callers wait for it instead). */
    private volatile boolean blocked;
    /**
     * The call whose reply is being read: no longer waiting in the control client, so failed by the reader if need be,
     * and watched by the {@link Watchdog} (a memserver that stops in the middle of a reply leaves its reader blocked).
     */
    private volatile TcpCall current;

    ReplyReader(Link channel, SocketDescriptor descriptor, String peer, ControlClient control, RequestWriter writer,
            ConnectionStats stats, AtomicLong busyBytes) throws IOException {
        this.channel = channel;
        this.descriptor = descriptor;
        this.peer = peer;
        this.control = control;
        this.writer = writer;
        this.stats = stats;
        this.busyBytes = busyBytes;
        this.spinner = new Spinner(channel, control::issued);
        this.replies = new MessageReader(channel, decoder, in);
    }

    /**
     * Makes a reply's header readable, writing queued requests first (what cannot block, the rest to the flusher) and
     * polling the socket before blocking: a run of polls that find nothing turns into blocking at once, as on a CPU
     * shared with the memserver, where yielding does not reliably let it run. With {@code stepAside} (the reader
     * thread in caller-driven mode) it returns false instead as soon as that says a caller asks for the read role.
     */
    boolean awaitHeader(BooleanSupplier stepAside) throws IOException {
        while (in.remaining() < Protocol.HEADER) {
            if (!writer.idle() && !writer.writeBesideReplies()) {
                writer.wakeFlusher(); // the rest: we must not block writing what could stall the replies
            }
            if (stepAside != null && stepAside.getAsBoolean()) {
                return false;
            }
            int upTo = afterLarge ? Protocol.HEADER : Integer.MAX_VALUE;
            if (spinner.await(stepAside)) {
                MessageReader.readMore(channel, in, upTo);
            } else if (stepAside == null || !stepAside.getAsBoolean()) {
                blocked = true;
                try {
                    MessageReader.readMore(channel, in, upTo);
                } finally {
                    blocked = false;
                }
            }
        }
        return true;
    }

    /** The reader is blocked in a read (and so cannot step aside now). */
    boolean blocked() {
        return blocked;
    }

    /** The call whose reply is being read, if any (for the watchdog). */
    TcpCall current() {
        return current;
    }

    /**
     * Reads one reply, whose header is in (see {@link #awaitHeader}), and completes its call. The reply is checked
     * against its call before the call is taken: one that does not fit (READ data of another size, or for another
     * request) closes the connection with the call still waiting, so the close fails it.
     */
    void readOne() throws IOException, MalformedMessageException {
        Message m = replies.next();
        if (!(control.waiting(m.id()) instanceof TcpCall c)) {
            throw new MalformedMessageException("reply to unknown request " + m.id());
        }
        if (m instanceof Message.ReadReply r && (c.dst == null || r.length() != c.dst.byteSize())) {
            throw new MalformedMessageException("READ reply of " + r.length() + " bytes for "
                    + (c.dst == null ? "a " + c.what() : c.dst.byteSize() + " requested"));
        }
        if (!control.remove(c)) {
            throw new ClosedChannelException(); // failed meanwhile: the connection is closing
        }
        busyBytes.addAndGet(-c.weight);
        writer.answered(c);
        stats.recvMessages.increment();
        stats.recvBytes.add(Protocol.HEADER + (long) decoder.length());
        if (m instanceof Message.ReadReply r) {
            current = c; // watched by the watchdog while its data comes in
            int piped = c.pipe != null && descriptor != null ? splice(c.pipe, r.length()) : 0;
            ByteBuffer dst = c.dst.asByteBuffer().position(piped);
            int buffered = Math.min(in.remaining(), dst.remaining());
            dst.put(in.slice(in.position(), buffered));
            in.position(in.position() + buffered);
            TcpSockets.readFully(channel, dst); // the rest, if any, straight from the socket
            decoder.payloadMoved(r.length());
            afterLarge = r.length() >= TcpSockets.LARGE;
            current = null;
            c.future().complete(c.pipe != null ? (Object) piped : null);
        } else {
            afterLarge = false;
            control.answer(c, m);
        }
    }

    /**
     * Moves the first bytes of a READ's {@code length} bytes of data into {@code pipe}: what {@code in} holds of it,
     * then from the socket as it comes, until all are in or the pipe is full. Returns how many went in; the caller
     * reads the rest into memory.
     */
    private int splice(Pipe pipe, int length) throws IOException {
        if (!descriptor.enter()) {
            throw new ClosedChannelException();
        }
        try {
            int moved = 0;
            int buffered = Math.min(in.remaining(), length);
            if (buffered > 0) {
                moved = pipe.write(in.slice(in.position(), buffered));
                in.position(in.position() + moved);
                if (moved < buffered) {
                    return moved;
                }
            }
            while (moved < length) {
                int ready = channel.available();
                if (ready <= 0) {
                    // Wait for input without taking it. The connection's close shuts the socket down, which ends the
                    // wait; the period only bounds a wait on a socket that was closed some other way.
                    if (!descriptor.awaitReadable(SPLICE_POLL_MILLIS)) {
                        continue;
                    }
                    ready = length - moved; // splice returns with what is there once something is
                }
                int n = pipe.spliceFrom(descriptor.fd(), Math.min(ready, length - moved));
                if (n < 0) {
                    throw new EOFException();
                } else if (n == 0) {
                    return moved; // the pipe is full: its slots hold socket buffers, which may be small
                }
                moved += n;
            }
            return moved;
        } finally {
            descriptor.exit();
        }
    }

    /** Reading failed with {@code e}: what the connection closes with (see {@link #takeCurrent}). */
    RemoteMemoryException failure(Exception e) {
        if (e instanceof MalformedMessageException) {
            return new RemoteMemoryException(Status.CONNECTION_LOST, "memserver " + peer + " sent a malformed reply ("
                    + e.getMessage() + "); connection closed");
        } else if (e instanceof EOFException) {
            return new RemoteMemoryException(Status.CONNECTION_LOST, "memserver " + peer + " closed the connection");
        } else if (e instanceof ClosedByInterruptException) {
            return new RemoteMemoryException(Status.CONNECTION_LOST, "connection to memserver " + peer
                    + " closed: a caller reading its replies (caller-driven completion) was interrupted", e);
        } else if (e instanceof IOException) {
            return new RemoteMemoryException(Status.CONNECTION_LOST, "lost memserver " + peer + ": "
                    + e.getMessage(), e);
        }
        log.error("tcp reader for {} failed", peer, e);
        return new RemoteMemoryException(Status.CONNECTION_LOST, "internal error reading from " + peer, e);
    }

    /** The call whose reply was being read when reading failed, no longer current; or null. */
    TcpCall takeCurrent() {
        TcpCall c = current;
        current = null;
        return c;
    }
}
