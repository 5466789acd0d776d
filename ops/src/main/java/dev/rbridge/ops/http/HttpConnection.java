package dev.rbridge.ops.http;

import dev.rbridge.common.Closeables;
import dev.rbridge.common.Durations;
import dev.rbridge.common.PeerGroup;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.util.Locale;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;

/**
 * One connection and its state machine: reading a request (for the idle timeout while none has begun, then the
 * request timeout: 408), a worker computing the answer (503 at the handler timeout), writing it
 * ({@link ResponseWriter}, within the write timeout), and, after an error answer, lingering with its output shut
 * so the peer reads the answer rather than a reset. Touched by the selector thread only: workers hand answers back
 * through {@link SelectorHandOff}.
 */
final class HttpConnection {
    private static final int READ_BUFFER = 4096;

    private enum State {
        /** Waiting for (the rest of) a request; evictable. */
        READING,
        /** A worker computes the answer; not evictable; cut off with a 503 at the handler timeout. */
        PROCESSING,
        /** Writing the answer; evictable once the peer has taken none of it for the write stall time. */
        WRITING,
        /** Output shut after an error answer, draining input until the peer closes or the linger ends; evictable. */
        LINGERING
    }

    private final SocketChannel ch;
    private final InetSocketAddress peer;
    private final PeerGroup peerGroup;
    private final InetSocketAddress local;
    private final OpsHttpConfig config;
    private final RefusalLog refusals;
    private final WorkerPool workers;
    private final HttpConnectionSlots slots;
    private final HttpRequestDecoder decoder;
    private final ByteBuffer in = ByteBuffer.allocate(READ_BUFFER);
    private final ResponseWriter writer;
    private SelectionKey key;
    /** The request a worker answers (PROCESSING), until its answer is taken or it is cut off. */
    private HandlerJob job;
    private State state = State.READING;
    private long since = System.nanoTime();
    private long requestStart;
    private boolean served;
    private boolean closed;

    HttpConnection(SocketChannel ch, InetSocketAddress peer, InetSocketAddress local, OpsHttpConfig config,
            RefusalLog refusals, WorkerPool workers, HttpConnectionSlots slots) {
        this.ch = ch;
        this.peer = peer;
        this.peerGroup = PeerGroup.of(peer.getAddress());
        this.local = local;
        this.config = config;
        this.refusals = refusals;
        this.workers = workers;
        this.slots = slots;
        this.decoder = new HttpRequestDecoder(config.requestLimits());
        this.writer = new ResponseWriter(ch, config);
    }

    /** The error answer for a refusal, with its headers. */
    static HttpResponse render(OpsHttpConfig config, HttpError e) {
        return config.errorPage().render(e.status(), e.getMessage()).withHeaders(e.headers());
    }

    /** Starts reading. */
    void register(Selector selector) throws ClosedChannelException {
        key = ch.register(selector, SelectionKey.OP_READ, this);
    }

    /** The peer's address group (an IPv4 address, an IPv6 /64), by which connections are capped. */
    PeerGroup peerGroup() {
        return peerGroup;
    }

    /** When the connection entered its current state. */
    long since() {
        return since;
    }

    boolean isClosed() {
        return closed;
    }

    /** Whether an answer is being written (it may look stalled: {@link #probe()} tells). */
    boolean writing() {
        return state == State.WRITING;
    }

    boolean evictable(long now) {
        return switch (state) {
            case READING, LINGERING -> true;
            case PROCESSING -> false;
            case WRITING -> writer.stalled(now);
        };
    }

    /** When the current state runs out ({@link #expire()}). */
    long deadline() {
        return switch (state) {
            case READING -> requestStart != 0 ? requestStart + config.requestTimeout().toNanos()
                    : since + config.idleTimeout().toNanos();
            case PROCESSING -> since + config.handlerTimeout().toNanos();
            case WRITING -> writer.deadline();
            case LINGERING -> since + config.linger().toNanos();
        };
    }

    /** The selector found the connection ready. */
    void ready(SelectionKey k) {
        try {
            if (k.isValid() && k.isReadable()) {
                readable();
            }
            if (!closed && k.isValid() && k.isWritable()) {
                flush();
            }
        } catch (IOException e) {
            close(); // the peer reset or went away: its business
        } catch (RuntimeException e) { // a bug, not the peer's doing; still, the peer must not flood the log
            failed(e);
        }
    }

    /** Writes what the socket takes now, without waiting to be told it is writable. */
    void probe() {
        try {
            flush();
        } catch (IOException e) {
            close();
        } catch (RuntimeException e) {
            failed(e);
        }
    }

    private void failed(RuntimeException e) {
        refusals.warn("connection-failure", "connection from " + peer + " failed", e);
        close();
    }

    private void readable() throws IOException {
        if (state == State.LINGERING) {
            in.clear();
            if (ch.read(in) < 0) {
                close();
            }
            in.clear();
            return;
        }
        if (state != State.READING) {
            return;
        }
        if (ch.read(in) < 0) {
            close();
            return;
        }
        decode();
    }

    /** Decodes what {@code in} holds; dispatches a complete request or answers a broken one. */
    private void decode() {
        HttpRequest request;
        in.flip();
        try {
            request = decoder.next(in);
        } catch (HttpError e) {
            in.clear(); // the stream broke a rule: nothing after it can be framed
            refusals.refused(e.refusal(), "refused a request from " + peer + ": " + e.getMessage());
            answer(render(config, e), true, false);
            return;
        }
        in.compact();
        if (request == null) {
            if (decoder.inProgress() && requestStart == 0) {
                requestStart = System.nanoTime();
            }
            return;
        }
        dispatch(request);
    }

    /** Hands a complete request to the worker pool; 503 when it is full. */
    private void dispatch(HttpRequest request) {
        requestStart = 0;
        served = true;
        state = State.PROCESSING;
        since = System.nanoTime();
        key.interestOps(0); // the next pipelined request waits in the buffer; TCP pushes back on the rest
        job = new HandlerJob(this, request.from(peer, local), workers);
        try {
            workers.execute(job);
        } catch (RejectedExecutionException e) {
            boolean head = job.head;
            job = null;
            refusals.refused(Refusal.BUSY, "refused a request from " + peer + ": every worker busy and "
                    + config.queue() + " requests queued");
            answer(config.errorPage().render(503, "busy; try again later").encode(head, true), true);
        }
    }

    /** Selector thread: takes {@code done}'s answer (null: none could be made), unless it was cut off. */
    void answered(HandlerJob done, ByteBuffer bytes, Runnable afterSent) {
        if (job != done) {
            return;
        }
        job = null;
        if (bytes == null) {
            close();
            return;
        }
        writer.afterSent(afterSent);
        if (closed) {
            writer.sent(); // an accepted operation goes ahead even if its caller did not wait for the answer
        } else {
            answer(bytes, done.close);
        }
    }

    private void answer(ByteBuffer bytes, boolean close) {
        if (closed) {
            return;
        }
        state = State.WRITING;
        since = System.nanoTime();
        writer.begin(bytes, close, since);
        try {
            flush();
        } catch (IOException e) {
            close();
        }
    }

    private void answer(HttpResponse response, boolean close, boolean head) {
        answer(response.encode(head, close), close);
    }

    private void flush() throws IOException {
        if (state != State.WRITING) {
            return;
        }
        if (!writer.write()) {
            key.interestOps(SelectionKey.OP_WRITE);
            return;
        }
        writer.sent();
        if (writer.closeAfter()) {
            // stop writing, keep reading a moment: closing with unread input would reset the answer away
            ch.shutdownOutput();
            state = State.LINGERING;
            since = System.nanoTime();
            key.interestOps(SelectionKey.OP_READ);
            return;
        }
        state = State.READING;
        since = System.nanoTime();
        decode();
        if (state == State.READING) {
            key.interestOps(SelectionKey.OP_READ);
        }
    }

    /** The current state ran out ({@link #deadline()}). */
    void expire() {
        switch (state) {
            case READING -> expireReading();
            case WRITING -> {
                refusals.refused(Refusal.WRITE_TIMEOUT, "peer " + peer + " did not take its answer within "
                        + Durations.human(config.writeTimeout()));
                close();
            }
            case LINGERING -> close();
            case PROCESSING -> cutOff();
        }
    }

    private void expireReading() {
        if (requestStart != 0) {
            refusals.refused(Refusal.REQUEST_TIMEOUT, "request from " + peer + " not complete within "
                    + Durations.human(config.requestTimeout()));
            requestStart = 0;
            answer(config.errorPage().render(408, "request not complete within "
                    + Durations.human(config.requestTimeout())), true, false);
        } else {
            if (!served) { // a keep-alive connection going quiet after its requests is normal
                refusals.refused(Refusal.IDLE_TIMEOUT, "connection from " + peer + " sent nothing for "
                        + Durations.human(config.idleTimeout()));
            }
            close();
        }
    }

    /** At the handler timeout: a 503 for the request, unless its answer came just now. */
    private void cutOff() {
        HandlerJob j = job;
        if (!j.cutOff()) {
            j.deliver(); // answered just now: take it here rather than wait for the worker's hand-off
            return;
        }
        job = null;
        refusals.refused(Refusal.HANDLER_TIMEOUT, "no answer to " + j.what() + " from " + peer + " within "
                + Durations.human(config.handlerTimeout()));
        answer(config.errorPage().render(503, "no answer within "
                + Durations.human(config.handlerTimeout()) + "; try again later"), true, j.head);
    }

    /** Closes the connection for a newcomer, telling a peer half-way through a request why. */
    void evict() {
        long now = System.nanoTime();
        String why = state == State.WRITING
                ? "its answer untaken for " + writer.untakenMillis(now) + " ms"
                : state.name().toLowerCase(Locale.ROOT) + " for " + TimeUnit.NANOSECONDS.toMillis(now - since)
                        + " ms";
        refusals.refused(Refusal.EVICTED, "evicted a connection from " + peer + " (" + why + ") for a new one");
        if (state == State.READING && decoder.inProgress()) {
            try { // one non-blocking try to say why to a client that is half-way through a request
                ch.write(config.errorPage().render(503, "evicted for a newer connection; too many connections")
                        .encode(false, true));
            } catch (IOException | RuntimeException e) {
                // evicted all the same
            }
        }
        close();
    }

    void close() {
        if (closed) {
            return;
        }
        closed = true;
        writer.sent(); // an accepted operation goes ahead even if its caller did not wait for the answer
        if (key != null) {
            key.cancel();
        }
        Closeables.closeQuietly(ch);
        slots.release(this);
    }
}
