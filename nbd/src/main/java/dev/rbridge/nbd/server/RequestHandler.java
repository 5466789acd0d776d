package dev.rbridge.nbd.server;

import dev.rbridge.common.splice.Pipe;
import dev.rbridge.nbd.device.BlockDevice;
import dev.rbridge.nbd.device.BlockDeviceException;
import dev.rbridge.nbd.device.Extent;
import dev.rbridge.nbd.protocol.Errno;
import dev.rbridge.nbd.protocol.Nbd;
import dev.rbridge.nbd.protocol.ReplyEncoder;
import dev.rbridge.nbd.protocol.Request;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.Consumer;

/**
 * Carries out the requests of one session that passed the {@link RequestValidator}: starts each at the device and,
 * from whichever thread completes it, makes its reply (simple or structured, as the session agreed; a device failure
 * becomes its error number). Replies go to the {@link Replies} of the connection's {@link Transmission}; this class
 * never waits.
 */
final class RequestHandler {
    /** The connection's log lines, under its name. */
    private static final Logger log = LoggerFactory.getLogger(Connection.class);
    /** Extents per BLOCK_STATUS reply; the spec lets a server stop early, and clients ask again from there. */
    private static final int MAX_EXTENTS = 4096;

    /** Where a finished request's reply goes: the transmission counts it, keeps its clock and queues the reply. */
    interface Replies {
        void complete(Request r, long start, Errno errno, Reply reply);
    }

    private final long id;
    private final NbdServer server;
    private final Session session;
    private final BlockDevice device;
    private final boolean structured;
    /** The pipes of spliced READs, or null: READ data is copied. */
    private final ReadPipes readPipes;
    private final Consumer<ByteBuffer> releasePayload;
    private final Replies replies;

    /** @param releasePayload gives a payload buffer back to the pool and its bytes back to the budget */
    RequestHandler(long id, NbdServer server, Session session, ReadPipes readPipes,
            Consumer<ByteBuffer> releasePayload, Replies replies) {
        this.id = id;
        this.server = server;
        this.session = session;
        this.device = session.device();
        this.structured = session.structuredReplies();
        this.readPipes = readPipes;
        this.releasePayload = releasePayload;
        this.replies = replies;
    }

    /** Starts a validated request at the device; a READ brings the buffer the budget granted for its data. */
    void start(Request r, long start, ByteBuffer readBuffer) {
        boolean fua = r.hasFlag(Nbd.CMD_FLAG_FUA);
        CompletableFuture<?> op;
        try {
            op = switch (r.type()) {
                case Nbd.CMD_READ -> read(r, start, readBuffer);
                case Nbd.CMD_WRITE -> device.write(r.offset(), r.payload(), fua);
                case Nbd.CMD_FLUSH -> device.flush();
                case Nbd.CMD_TRIM -> device.trim(r.offset(), r.length(), fua);
                case Nbd.CMD_WRITE_ZEROES -> device.writeZeroes(r.offset(), r.length(),
                        !r.hasFlag(Nbd.CMD_FLAG_NO_HOLE), fua);
                case Nbd.CMD_CACHE -> device.cache(r.offset(), r.length());
                case Nbd.CMD_BLOCK_STATUS -> blockStatus(r, start);
                default -> throw new IllegalStateException("validated command " + r.type());
            };
        } catch (RuntimeException e) {
            op = CompletableFuture.failedFuture(e);
        }
        if (r.type() == Nbd.CMD_READ || r.type() == Nbd.CMD_BLOCK_STATUS) {
            return; // these reply from their own completion handlers
        }
        op.whenComplete((v, t) -> {
            releasePayload.accept(r.payload());
            if (t == null) {
                replies.complete(r, start, null, new Reply.Simple(r.handle(), 0, null));
            } else {
                failed(r, start, t);
            }
        });
    }

    /** Replies with an error to a request that never reached the device. */
    void reject(Request r, long start, Errno errno, String message) {
        releasePayload.accept(r.payload());
        log.debug("connection {}: {} -> {} ({})", id, r, errno, message);
        replies.complete(r, start, errno, errorReply(r, errno, message));
    }

    private CompletableFuture<?> read(Request r, long start, ByteBuffer buffer) {
        int length = (int) r.length();
        if (length == 0) {
            replies.complete(r, start, null, structured ? new Reply.Done(r.handle())
                    : new Reply.Simple(r.handle(), 0, null));
            return CompletableFuture.completedFuture(null);
        }
        Pipe pipe = readPipes == null ? null : readPipes.take(r.offset(), length);
        if (pipe != null) {
            return readSpliced(r, start, buffer, pipe);
        }
        CompletableFuture<Void> f;
        try {
            f = device.read(r.offset(), buffer);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete((v, t) -> {
            if (t != null) {
                releasePayload.accept(buffer);
                failed(r, start, t);
                return;
            }
            buffer.position(0).limit(length);
            replies.complete(r, start, null, readData(r, buffer));
        });
        return f;
    }

    private CompletableFuture<?> readSpliced(Request r, long start, ByteBuffer buffer, Pipe pipe) {
        CompletableFuture<Integer> f;
        try {
            f = device.readSpliced(r.offset(), buffer, pipe);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete((piped, failure) -> {
            try {
                splicedReadDone(r, start, buffer, pipe, piped, failure);
            } catch (RuntimeException e) {
                log.error("connection {}: completing a spliced READ failed", id, e);
                failed(r, start, e);
            }
        });
        return f;
    }

    /** A spliced READ came back from the device with {@code piped} bytes in the pipe, or failed. */
    private void splicedReadDone(Request r, long start, ByteBuffer buffer, Pipe pipe, Integer piped,
            Throwable failure) {
        int length = (int) r.length();
        Throwable t = failure;
        if (t == null && (piped == null || piped < 0 || piped > length || (piped > 0 && piped != pipe.held()))) {
            t = new IllegalStateException("the device reported " + piped + " bytes spliced of " + length
                    + " where the pipe holds " + pipe.held());
        }
        if (t != null) {
            readPipes.discard(pipe, length);
            releasePayload.accept(buffer);
            failed(r, start, t);
        } else if (piped == 0) { // read into memory after all (a failed spliced attempt may have left bytes)
            readPipes.discard(pipe, length);
            buffer.position(0).limit(length);
            replies.complete(r, start, null, readData(r, buffer));
        } else {
            buffer.position(piped).limit(length);
            replies.complete(r, start, null, new Reply.PipedRead(r.handle(), r.offset(), structured, pipe, buffer,
                    length));
        }
    }

    /** A READ's data from {@code buffer}: one OFFSET_DATA chunk with structured replies. */
    private Reply readData(Request r, ByteBuffer buffer) {
        return structured ? new Reply.ReadData(r.handle(), r.offset(), buffer)
                : new Reply.Simple(r.handle(), 0, buffer);
    }

    private CompletableFuture<?> blockStatus(Request r, long start) {
        int max = r.hasFlag(Nbd.CMD_FLAG_REQ_ONE) ? 1 : MAX_EXTENTS;
        CompletableFuture<List<Extent>> f;
        try {
            f = device.blockStatus(r.offset(), r.length(), max);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete((extents, t) -> {
            if (t != null) {
                failed(r, start, t);
                return;
            }
            List<Extent> list = extents.isEmpty() ? List.of(new Extent(r.length(), 0)) : extents;
            int n = Math.min(list.size(), max);
            int[] lengths = new int[n];
            int[] states = new int[n];
            for (int i = 0; i < n; i++) {
                // a descriptor length is 32 bits; the request length is too, so no extent of a valid reply exceeds it
                lengths[i] = (int) Math.min(list.get(i).length(), r.length());
                states[i] = list.get(i).state();
            }
            replies.complete(r, start, null, new Reply.BlockStatus(r.handle(), Session.BASE_ALLOCATION_ID, lengths,
                    states, n));
        });
        return f;
    }

    /** The device failed {@code r}: its error number if it named one, else EIO. */
    private void failed(Request r, long start, Throwable t) {
        Throwable cause = t instanceof CompletionException && t.getCause() != null ? t.getCause() : t;
        Errno errno;
        String message;
        if (cause instanceof BlockDeviceException e) {
            errno = e.errno();
            message = e.getMessage();
        } else {
            errno = Errno.EIO;
            message = "I/O error: " + cause;
            server.logLimited("device_error", "connection {}: {} failed on export '{}'", id, r,
                    session.export().name(), cause);
        }
        replies.complete(r, start, errno, errorReply(r, errno, message));
    }

    private Reply errorReply(Request r, Errno errno, String message) {
        return structured ? new Reply.Error(r.handle(), errno.code(), ReplyEncoder.message(message))
                : new Reply.Simple(r.handle(), errno.code(), null);
    }
}
