package dev.rbridge.nbd.server;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.GatheringByteChannel;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The write side of one connection. Replies are queued by whichever thread completes a request; the first thread to
 * find the outbox idle writes everything queued in one gathering write, the others just leave their reply behind
 * (combining: no writer thread, no wake-up on the hot path). The connection's reader <em>corks</em> the outbox while it
 * dispatches a batch of requests, so replies to a burst of pipelined requests leave in one system call.
 *
 * <p>Once a write fails the outbox is broken: queued and later replies are dropped and their buffers released, and
 * {@code onBroken} closes the connection. Nothing here throws at the threads that complete requests.
 */
final class Outbox {
    private static final org.slf4j.Logger log = org.slf4j.LoggerFactory.getLogger(Outbox.class);
    private static final int MAX_BATCH = 256;
    private static final int MAX_BATCH_PAYLOAD = 8 << 20;
    private static final int HEADER_SPACE = 256 << 10;

    private final GatheringByteChannel channel;
    private final BufferPool pool;
    private final Runnable onBroken;
    private final ConcurrentLinkedQueue<Reply> queue = new ConcurrentLinkedQueue<>();
    private final AtomicBoolean writing = new AtomicBoolean();
    private final ByteBuffer headers = ByteBuffer.allocateDirect(HEADER_SPACE);
    private final ByteBuffer[] vector = new ByteBuffer[2 * MAX_BATCH];
    private final Reply[] batch = new Reply[MAX_BATCH];
    private volatile boolean broken;
    private volatile Thread corkedBy;

    Outbox(GatheringByteChannel channel, BufferPool pool, Runnable onBroken) {
        this.channel = channel;
        this.pool = pool;
        this.onBroken = onBroken;
    }

    void send(Reply reply) {
        if (broken) {
            pool.release(reply.payload());
            return;
        }
        queue.add(reply);
        if (corkedBy != Thread.currentThread()) {
            drain();
        }
    }

    /** Replies sent by this thread are held until {@link #uncork}. */
    void cork() {
        corkedBy = Thread.currentThread();
    }

    void uncork() {
        corkedBy = null;
        drain();
    }

    boolean broken() {
        return broken;
    }

    /** Nothing left to write: all replies are out, or the connection broke and they never will be. */
    boolean idle() {
        return broken || (queue.isEmpty() && !writing.get());
    }

    private void drain() {
        // Re-checking after releasing the flag closes the race with a sender that queued while we were writing.
        while (!broken && !queue.isEmpty() && writing.compareAndSet(false, true)) {
            try {
                writeBatch();
            } finally {
                writing.set(false);
            }
        }
        if (broken) {
            discardQueued();
        }
    }

    private void writeBatch() {
        headers.clear();
        int replies = 0;
        int buffers = 0;
        long payloadBytes = 0;
        Reply r;
        while (replies < MAX_BATCH && payloadBytes < MAX_BATCH_PAYLOAD && (r = queue.peek()) != null) {
            if (r.headerLength() > headers.remaining()) {
                if (replies > 0) {
                    break;
                }
                // A header larger than the shared space (a huge BLOCK_STATUS list) gets its own buffer.
                ByteBuffer own = ByteBuffer.allocateDirect(r.headerLength());
                r.encodeHeader(own);
                vector[buffers++] = own.flip();
            } else {
                int start = headers.position();
                r.encodeHeader(headers);
                vector[buffers++] = headers.slice(start, headers.position() - start);
            }
            queue.poll();
            batch[replies++] = r;
            ByteBuffer payload = r.payload();
            if (payload != null && payload.hasRemaining()) {
                vector[buffers++] = payload;
                payloadBytes += payload.remaining();
            }
        }
        try {
            int first = 0;
            while (first < buffers) {
                channel.write(vector, first, buffers - first);
                while (first < buffers && !vector[first].hasRemaining()) {
                    first++;
                }
            }
        } catch (IOException e) {
            // the client went away (reset, closed): the connection's reader reports how it ended
            broken = true;
            onBroken.run();
        } catch (RuntimeException e) {
            log.error("writing replies failed; closing the connection", e);
            broken = true;
            onBroken.run();
        } finally {
            for (int i = 0; i < replies; i++) {
                pool.release(batch[i].payload());
                batch[i] = null;
            }
            java.util.Arrays.fill(vector, 0, buffers, null);
        }
    }

    private void discardQueued() {
        Reply r;
        while ((r = queue.poll()) != null) {
            pool.release(r.payload());
        }
    }
}
