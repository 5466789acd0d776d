package dev.rbridge.nbd.server;

import dev.rbridge.common.splice.Pipe;
import dev.rbridge.common.splice.SocketDescriptor;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.util.Arrays;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * The write side of one connection, on a non-blocking channel. Replies are queued by whichever thread completes a
 * request; the first thread to find the outbox idle writes what is queued in one gathering write and leaves (combining:
 * no writer thread, no wake-up on the hot path). A write never waits: when the client does not read and the socket's
 * buffer is full, what is left stays here, the outbox is <em>blocked</em>, and only the connection's own thread goes
 * on writing, when its selector says the socket is writable. So a client that stops reading stalls its own
 * connection, never the thread that completed its request (a memserver link's reader, the device's thread).
 *
 * <p>The connection's thread <em>corks</em> the outbox while it dispatches a batch of requests, so replies to a burst
 * of pipelined requests leave in one system call.
 *
 * <p>A spliced READ's data waits in a pipe: its reply ends a batch, and the pipe is spliced into the socket after its
 * header and before the rest of its data, through our own descriptor of the socket (so never into a reused number).
 *
 * <p>Once a write fails the outbox is broken: queued and later replies are dropped and their payloads released, and
 * {@code onBroken} closes the connection. Nothing here throws at the threads that complete requests.
 */
final class Outbox {
    private static final Logger log = LoggerFactory.getLogger(Outbox.class);
    private static final int MAX_BATCH = 256;
    private static final int MAX_BATCH_PAYLOAD = 8 << 20;
    /** Room for a full batch of the usual headers (32 bytes or less); a larger one goes in a buffer of its own. */
    private static final int HEADER_SPACE = 16 << 10;

    private final Wire channel;
    /** Our descriptor of the plain socket, for spliced READ data (made with the first such READ). */
    private final Supplier<SocketDescriptor> descriptor;
    private final Consumer<Reply> done;
    private final Runnable onBroken;
    private final Runnable onBlocked;
    private final ConcurrentLinkedQueue<Reply> queue = new ConcurrentLinkedQueue<>();
    private final AtomicBoolean writing = new AtomicBoolean();
    private final ByteBuffer headers = ByteBuffer.allocateDirect(HEADER_SPACE);
    // The batch being written, owned by whoever holds `writing`: vector[first..buffers) is still to go.
    private final ByteBuffer[] vector = new ByteBuffer[2 * MAX_BATCH];
    private final Reply[] batch = new Reply[MAX_BATCH];
    private volatile int buffers;
    private int first;
    /** The batch's last reply's pipe, or null: spliced once vector[..pipeAt) is written, before the rest. */
    private Pipe pipe;
    private int pipeAt;
    private int replies;
    private volatile boolean broken;
    private volatile boolean blocked;
    /** When the client last let a byte through while replies waited (System.nanoTime), 0 when none wait. */
    private volatile long stalledFrom;
    private volatile Thread corkedBy;

    /**
     * @param done      runs for each reply once it is written (or dropped): gives its payload back, frees its slot
     * @param onBroken  closes the connection after a failed write
     * @param onBlocked tells the connection's thread that the socket is full and it must wait to write
     */
    Outbox(Wire channel, Supplier<SocketDescriptor> descriptor, Consumer<Reply> done, Runnable onBroken,
            Runnable onBlocked) {
        this.channel = channel;
        this.descriptor = descriptor;
        this.done = done;
        this.onBroken = onBroken;
        this.onBlocked = onBlocked;
    }

    void send(Reply reply) {
        if (broken) {
            done.accept(reply);
            return;
        }
        queue.add(reply);
        if (broken) {
            cleanUp(); // closed while we queued: nobody else might release it
            return;
        }
        if (corkedBy != Thread.currentThread() && !blocked) {
            drain();
        }
    }

    /** Replies sent by this thread are held until {@link #uncork}. */
    void cork() {
        corkedBy = Thread.currentThread();
    }

    void uncork() {
        corkedBy = null;
        if (!blocked) {
            drain();
        }
    }

    /** The connection's thread found the socket writable again: go on writing. */
    void writable() {
        blocked = false;
        drain();
    }

    boolean broken() {
        return broken;
    }

    /** The socket is full and replies are waiting for the client to read. */
    boolean blocked() {
        return blocked;
    }

    /**
     * Nanos (System.nanoTime) since when replies have waited with no byte written, or 0 when none wait on the
     * client: how long a client has not been reading.
     */
    long stalledSince() {
        return blocked ? stalledFrom : 0;
    }

    /** Nothing left to write: all replies are out, or the connection broke and they never will be. */
    boolean idle() {
        return broken || (queue.isEmpty() && buffers == 0 && !writing.get() && !channel.pendingOutput());
    }

    private void drain() {
        // Re-checking after releasing the flag closes the race with a sender that queued while we were writing.
        while (!broken && !blocked && (buffers > 0 || !queue.isEmpty() || channel.pendingOutput())
                && writing.compareAndSet(false, true)) {
            try {
                if (buffers == 0) {
                    fillBatch();
                }
                writeBatch();
            } finally {
                writing.set(false);
            }
        }
        if (broken) {
            cleanUp();
        }
    }

    /**
     * Once broken, whoever can take the writing role drops the half-written batch and the queue. Both the writer that
     * leaves and {@link #close} try, after setting or seeing {@code broken}: one of them gets the role, so nothing
     * is left holding memory.
     */
    private void cleanUp() {
        // Re-checking after releasing the role catches a reply queued by a sender that found the role taken.
        while (writing.compareAndSet(false, true)) {
            try {
                releaseBatch();
                discardQueued();
            } finally {
                writing.set(false);
            }
            if (queue.isEmpty()) {
                return;
            }
        }
    }

    private void fillBatch() {
        headers.clear();
        long payloadBytes = 0;
        int b = 0;
        int n = 0;
        Reply r;
        while (n < MAX_BATCH && payloadBytes < MAX_BATCH_PAYLOAD && (r = queue.peek()) != null) {
            if (r.headerLength() > headers.remaining()) {
                if (n > 0) {
                    break;
                }
                // A header larger than the shared space (a long BLOCK_STATUS list) gets a buffer of its own.
                ByteBuffer own = ByteBuffer.allocate(r.headerLength());
                r.encodeHeader(own);
                vector[b++] = own.flip();
            } else {
                int start = headers.position();
                r.encodeHeader(headers);
                vector[b++] = headers.slice(start, headers.position() - start);
            }
            queue.poll();
            batch[n++] = r;
            Pipe piped = r.pipe();
            if (piped != null) {
                pipe = piped;
                pipeAt = b;
                payloadBytes = MAX_BATCH_PAYLOAD; // a pipe ends the batch; its rest still goes with it
            }
            ByteBuffer payload = r.payload();
            if (payload != null && payload.hasRemaining()) {
                vector[b++] = payload;
                payloadBytes += payload.remaining();
            }
        }
        first = 0;
        replies = n;
        buffers = b;
    }

    private void writeBatch() {
        try {
            long progressed = 0;
            int end = buffers;
            while (true) {
                boolean piping = pipe != null && pipe.held() > 0;
                int stop = piping ? pipeAt : end;
                long n;
                if (first < stop) {
                    n = channel.write(vector, first, stop - first);
                    while (first < stop && !vector[first].hasRemaining()) {
                        first++;
                    }
                } else if (piping) {
                    n = splicePipe(pipeAt < end);
                } else {
                    break;
                }
                progressed += n;
                if (n == 0) {
                    // The socket is full: the client is not reading. Leave the rest to the connection's thread.
                    block(progressed);
                    return;
                }
            }
            releaseBatch(); // every byte is taken; with TLS, some may wait in its records
            if (!channel.flush()) {
                block(progressed);
                return;
            }
            stalledFrom = 0;
        } catch (IOException e) {
            // the client went away (reset, closed): the connection's reader reports how it ended
            fail();
        } catch (RuntimeException e) {
            log.error("writing replies failed; closing the connection", e);
            fail();
        }
    }

    /**
     * Splices what the socket takes now of the batch's pipe: bytes moved, 0 when the socket is full. {@code more}:
     * the rest of the reply's data follows from memory. A client that reset the connection raises SIGPIPE, which the
     * JVM ignores; the splice then fails as a write would.
     */
    private long splicePipe(boolean more) throws IOException {
        SocketDescriptor d = descriptor.get();
        if (d == null || !d.enter()) {
            throw new ClosedChannelException();
        }
        try {
            return pipe.spliceTo(d.fd(), Integer.MAX_VALUE, more);
        } finally {
            d.exit();
        }
    }

    private void block(long progressed) {
        if (progressed > 0 || stalledFrom == 0) {
            stalledFrom = System.nanoTime();
        }
        blocked = true;
        onBlocked.run();
    }

    private void fail() {
        broken = true;
        releaseBatch();
        onBroken.run();
    }

    private void releaseBatch() {
        for (int i = 0; i < replies; i++) {
            done.accept(batch[i]);
            batch[i] = null;
        }
        Arrays.fill(vector, 0, buffers, null);
        pipe = null; // closed by done, with its reply
        replies = 0;
        buffers = 0;
        first = 0;
    }

    /**
     * The connection is closing: drop what is still queued or half-written and give the payloads back. A writer busy
     * at this moment fails on the closed channel and cleans up itself.
     */
    void close() {
        broken = true;
        cleanUp();
    }

    private void discardQueued() {
        Reply r;
        while ((r = queue.poll()) != null) {
            done.accept(r);
        }
    }
}
