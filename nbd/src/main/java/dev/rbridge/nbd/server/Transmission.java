package dev.rbridge.nbd.server;

import dev.rbridge.common.splice.Pipe;
import dev.rbridge.nbd.device.BlockDevice;
import dev.rbridge.nbd.protocol.Errno;
import dev.rbridge.nbd.protocol.Nbd;
import dev.rbridge.nbd.protocol.NbdProtocolException;
import dev.rbridge.nbd.protocol.Request;
import dev.rbridge.nbd.protocol.RequestDecoder;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The transmission phase of one connection, on its non-blocking socket with a selector of its own: the connection's
 * thread reads and decodes requests, checks each ({@link RequestValidator}) and hands it to the
 * {@link RequestHandler}; replies go out through the {@link Outbox} from whichever thread completes them, and never
 * make that thread wait: what the client does not read stays queued until this thread can write it.
 *
 * <p>What the session holds is bounded: requests at the device ({@code maxInFlightPerConnection}) and payload bytes
 * (its {@link PayloadBudget.Account}). When a bound is reached the thread stops reading, so TCP pushes back on the
 * client, and a request that is decoded but cannot start yet waits for room; it is never refused for it. The clocks
 * the housekeeper reads ({@link #partialSinceNanos}, {@link #lastActiveNanos}, {@link #lastReadNanos}) are kept here.
 */
final class Transmission {
    /** The connection's log lines, under its name. */
    private static final Logger log = LoggerFactory.getLogger(Connection.class);
    /** Small, so little of a large WRITE payload is copied through it (the rest goes straight to its buffer). */
    private static final int READ_BUFFER = 64 << 10;

    private final Connection connection;
    private final NbdServer server;
    private final SocketChannel channel;
    private final Session session;
    private final BlockDevice device;
    private final long id;
    /** The socket, or TLS over it. */
    private final Wire wire;
    private final NbdServerMetrics.ExportMetrics exportMetrics;
    private final RequestValidator validator;
    private ByteBuffer in;
    // set once when the loop starts; read by completing threads, the housekeeper and closers
    private volatile Outbox outbox;
    private volatile Selector selector;
    private SelectionKey key;
    private volatile PayloadBudget.Account budget;
    /** The pipes of spliced READs, when the connection is plain and its device splices; else null (data is copied). */
    private volatile ReadPipes readPipes;
    private RequestDecoder decoder;
    private RequestHandler handler;
    private final AtomicInteger inFlight = new AtomicInteger();
    private int maxInFlight;
    /** Decoded, but waiting for a slot or for buffer memory before it can start. */
    private Request waiting;
    /** {@link #waiting} waits for a slot (a completion frees one), not for buffers (the budget wakes us). */
    private boolean waitingForSlot;
    /** This connection's thread is waiting for a slot or buffers: completions and releases must wake it. */
    private volatile boolean paused;
    /**
     * The last read returned less than it had room for and at most one request came of it: the client sends one at a
     * time, so the socket is dry and a read before waiting would only say so (a system call per request at queue
     * depth 1). A client that pipelines usually has more waiting by the time its requests are started.
     */
    private boolean socketDry;
    private int decodedSinceRead;
    private long requests;

    // read by the housekeeper (System.nanoTime values; 0 = not applicable)
    /**
     * Since when the client has been sending the request that has not fully arrived (from when its first bytes were
     * seen); 0 at a request boundary, and while this connection does not read (it waits for a slot or memory).
     */
    private volatile long partialSinceNanos;
    /** The last time a request started or finished. */
    private volatile long lastActiveNanos;
    /** The last time bytes arrived. */
    private volatile long lastReadNanos;

    Transmission(Connection connection, NbdServer server, SocketChannel channel, Session session,
            NbdServerMetrics.ExportMetrics exportMetrics) {
        this.connection = connection;
        this.server = server;
        this.channel = channel;
        this.session = session;
        this.device = session.device();
        this.id = connection.id();
        this.wire = session.tls() != null ? session.tls() : Wire.of(channel);
        this.exportMetrics = exportMetrics;
        this.validator = new RequestValidator(session);
        this.lastActiveNanos = System.nanoTime();
    }

    Session session() {
        return session;
    }

    long requests() {
        return requests;
    }

    long partialSinceNanos() {
        return partialSinceNanos;
    }

    long lastActiveNanos() {
        return lastActiveNanos;
    }

    long lastReadNanos() {
        return lastReadNanos;
    }

    /** Nanos since when replies have waited for the client to read them, or 0. */
    long repliesStalledSinceNanos() {
        Outbox o = outbox;
        return o == null ? 0 : o.stalledSince();
    }

    /** Payload bytes held now (buffers being received, at the device, or waiting to be sent). */
    long heldBytes() {
        PayloadBudget.Account b = budget;
        return b == null ? 0 : b.held();
    }

    /** Nothing in flight, nothing half-received, no memory held, nothing waiting to be written. */
    boolean idle() {
        Outbox o = outbox;
        return inFlight.get() == 0 && partialSinceNanos == 0 && heldBytes() == 0 && (o == null || o.idle());
    }

    /** True when nothing is in flight and every reply has been written. */
    boolean quiescent() {
        Outbox o = outbox;
        return inFlight.get() == 0 && (o == null || o.idle());
    }

    /**
     * Runs the session until the client disconnects (NBD_CMD_DISC: a normal return) or the connection fails.
     * {@code leftover} is what the client sent after the handshake.
     */
    void run(ByteBuffer leftover) throws IOException, NbdProtocolException {
        open(leftover);
        while (true) {
            outbox.cork();
            try {
                if (!dispatchAvailable()) {
                    return;
                }
            } finally {
                outbox.uncork();
            }
            if (outbox.broken()) {
                throw new ClosedChannelException();
            }
            boolean stopped = waiting != null || decoder.awaitingBuffer();
            if (!stopped && (!socketDry || decodedSinceRead > 1)) {
                int n = readSome();
                if (n < 0) {
                    throw new EOFException();
                }
                if (n > 0) {
                    lastReadNanos = System.nanoTime();
                    continue;
                }
            }
            await(stopped);
        }
    }

    /** The socket turns non-blocking with a selector of its own; the budget, pipes, outbox and decoder are made. */
    private void open(ByteBuffer leftover) throws IOException {
        in = ByteBuffer.allocateDirect(READ_BUFFER).put(leftover).flip();
        maxInFlight = server.config().maxInFlightPerConnection();
        selector = Selector.open();
        channel.configureBlocking(false);
        key = channel.register(selector, 0);
        Thread self = Thread.currentThread();
        budget = server.payloadBudget().open(connection.peerAddress(), selector::wakeup);
        readPipes = session.tls() == null && device.splicesReads() && Pipe.unavailable() == null
                ? new ReadPipes(id, channel, device, budget)
                : null;
        ReadPipes pipes = readPipes;
        outbox = new Outbox(wire, pipes == null ? () -> null : pipes::descriptor, this::replied,
                connection::closeChannel, () -> {
                    if (Thread.currentThread() != self) {
                        selector.wakeup(); // this thread must now wait for the socket to be writable
                    }
                });
        handler = new RequestHandler(id, server, session, pipes, this::releasePayload, this::complete);
        decoder = new RequestDecoder(this::allocatePayload, session.maximumPayload());
    }

    /** Decodes and starts requests until input runs dry or one must wait. False when the client sent DISC. */
    private boolean dispatchAvailable() throws NbdProtocolException {
        if (waiting != null) {
            if (!tryStart(waiting)) {
                partialSinceNanos = 0; // not reading: the client cannot send, so its clock does not run
                return true;
            }
            waiting = null;
        }
        Request r;
        while ((r = decoder.next(in)) != null) {
            partialSinceNanos = 0; // this one arrived whole; the next one's clock starts when its bytes are seen
            decodedSinceRead++;
            if (r.type() == Nbd.CMD_DISC) {
                log.debug("connection {}: NBD_CMD_DISC", id);
                return false;
            }
            if (!tryStart(r)) {
                waiting = r;
                return true;
            }
        }
        trackPartial();
        return true;
    }

    private int readSome() throws IOException {
        ByteBuffer sink = decoder.payloadSink();
        ByteBuffer into = sink != null && sink.remaining() > in.capacity() / 2 && !in.hasRemaining() ? sink : null;
        decodedSinceRead = 0;
        if (into != null) {
            int room = into.remaining();
            int n = wire.read(into); // a large WRITE payload goes from the socket straight into its buffer
            socketDry = n < room;
            return n;
        }
        in.compact();
        try {
            int room = in.remaining();
            int n = wire.read(in);
            socketDry = n < room;
            return n;
        } finally {
            in.flip();
        }
    }

    /**
     * Waits until the socket has input (unless {@code stopped}: a request waits for a slot or buffers, and then only
     * a completion or a release can let it go on), until it can take more replies if some wait, or until woken.
     */
    private void await(boolean stopped) throws IOException {
        if (stopped) {
            paused = true;
            // Re-check after announcing the pause: a completion between the check and the pause would not wake us.
            // (A wait for buffers needs no re-check: the budget recorded us as waiting before we got here.)
            if (waiting != null && waitingForSlot && inFlight.get() < maxInFlight) {
                paused = false;
                return;
            }
        }
        SecureWire tls = session.tls();
        if (!stopped && tls != null && tls.bufferedInput()) {
            socketDry = false; // decrypted input waits here: the socket would not say so
            return;
        }
        // TLS records the reader made (a key update's answer) wait for the socket as replies do
        boolean mustWrite = outbox.blocked() || wire.pendingOutput();
        key.interestOps((stopped ? 0 : SelectionKey.OP_READ) | (mustWrite ? SelectionKey.OP_WRITE : 0));
        selector.select();
        paused = false;
        boolean selected = selector.selectedKeys().contains(key) && key.isValid();
        int ready = selected ? key.readyOps() : 0;
        selector.selectedKeys().clear();
        if (!channel.isOpen()) {
            throw new ClosedChannelException();
        }
        if ((ready & SelectionKey.OP_READ) != 0) {
            socketDry = false;
        }
        if ((ready & SelectionKey.OP_WRITE) != 0) {
            outbox.writable();
        }
    }

    /** Keeps {@link #partialSinceNanos}: only time the client owes us bytes counts, not time we wait for buffers. */
    private void trackPartial() {
        if (decoder.atBoundary() || decoder.awaitingBuffer()) {
            partialSinceNanos = 0;
        } else if (partialSinceNanos == 0) {
            partialSinceNanos = System.nanoTime();
        }
    }

    /** Starts {@code r}, or returns false when it must wait for a slot or buffer memory. */
    private boolean tryStart(Request r) {
        long start = System.nanoTime();
        if (connection.draining()) {
            refuseDraining(r, start);
            return true;
        }
        if (inFlight.get() >= maxInFlight) {
            waitingForSlot = true;
            return false;
        }
        RequestValidator.Rejection rejection = validator.validate(r);
        ByteBuffer readBuffer = null;
        if (rejection == null && needsBuffer(r)) {
            int length = (int) r.length();
            if (!budget.tryAcquire(server.bufferPool().capacityFor(length))) {
                waitingForSlot = false;
                return false;
            }
            readBuffer = buffer(length);
        }
        requests++;
        lastActiveNanos = start;
        exportMetrics.requestStarted(r.type());
        inFlight.incrementAndGet(); // until its reply is written (or dropped with the connection)
        if (rejection != null) {
            handler.reject(r, start, rejection.errno(), rejection.reason());
        } else {
            handler.start(r, start, readBuffer);
        }
        return true;
    }

    /** A request arriving while the server shuts down. */
    private void refuseDraining(Request r, long start) {
        requests++;
        exportMetrics.requestStarted(r.type());
        if (session.structuredReplies()) {
            inFlight.incrementAndGet();
            handler.reject(r, start, Errno.ESHUTDOWN, "server is shutting down");
        } else {
            // Simple replies mean the Linux kernel (it uses nothing else), which turns any error reply into EIO
            // for the filesystem. Left unanswered, the request is requeued by the kernel once the connection
            // closes and its timeout passes, onto a reconnected socket (rbridge attach, nbd-client -persist): a
            // bridge restart then costs a pause, not an I/O error. The spec's ESHUTDOWN is a MAY-speed-up.
            releasePayload(r.payload());
            exportMetrics.requestCompleted(r.type(), 0, System.nanoTime() - start, Errno.ESHUTDOWN);
            log.debug("connection {}: {} left unanswered: shutting down", id, r);
        }
    }

    /** True when {@code r} needs buffer memory to start (a READ, for its data). */
    private boolean needsBuffer(Request r) {
        return r.type() == Nbd.CMD_READ && r.length() > 0;
    }

    /** The decoder's WRITE payload buffer, when the budget has room for it; null makes the decoder wait. */
    private ByteBuffer allocatePayload(int length) {
        return budget.tryAcquire(server.bufferPool().capacityFor(length)) ? buffer(length) : null;
    }

    /** A pooled buffer for {@code length} bytes, whose memory the budget already granted. */
    private ByteBuffer buffer(int length) {
        try {
            return server.bufferPool().acquire(length);
        } catch (RuntimeException | OutOfMemoryError e) {
            budget.release(server.bufferPool().capacityFor(length)); // never had it: give the grant back
            throw e;
        }
    }

    /** Gives a payload buffer back to the pool and its bytes back to the budget. */
    private void releasePayload(ByteBuffer b) {
        if (b == null || !b.isDirect()) {
            return; // none, or the empty payload of a zero-length WRITE
        }
        budget.release(server.bufferPool().capacityFor(b.capacity()));
        server.bufferPool().release(b);
    }

    /** A request finished: it is counted, and its reply queued. */
    private void complete(Request r, long start, Errno errno, Reply reply) {
        long bytes = r.type() == Nbd.CMD_READ || r.type() == Nbd.CMD_WRITE ? r.length() : 0;
        long nanos = System.nanoTime() - start;
        exportMetrics.requestCompleted(r.type(), bytes, nanos, errno);
        lastActiveNanos = start + nanos;
        outbox.send(reply);
    }

    /**
     * A reply left (or was dropped with the connection): its request no longer holds a slot or memory. Slots are held
     * until the reply is written, so a client that reads no replies cannot make replies pile up here.
     */
    private void replied(Reply reply) {
        releasePayload(reply.payload());
        if (reply instanceof Reply.PipedRead p) {
            readPipes.done(p.pipe(), p.length());
        }
        inFlight.decrementAndGet();
        if (paused) {
            selector.wakeup();
        }
    }

    // ---------------------------------------------------------------------------------------------------- ending

    /** Wakes this connection's thread if it waits in its selector. */
    void wakeup() {
        Selector s = selector;
        if (s != null) {
            s.wakeup();
        }
    }

    /** The channel was closed: the pipes' duplicate of the socket goes with it, and the waiting thread wakes. */
    void channelClosed() {
        ReadPipes pipes = readPipes;
        if (pipes != null) {
            pipes.closeDescriptor(); // our duplicate keeps the socket open: shut it down with the channel
        }
        wakeup(); // a closed channel does not wake a selector it is registered with
    }

    /**
     * Lets requests already at the device finish, so their buffers come back and their replies go out, for at most the
     * drain timeout; then the session counts as closed.
     */
    void drain() {
        long deadline = System.nanoTime() + server.config().drainTimeout().toNanos();
        paused = true; // completions and written replies wake us as they come
        while (!quiescent() && System.nanoTime() < deadline && outbox != null && !outbox.broken()
                && channel.isOpen()) {
            awaitWritable();
        }
        exportMetrics.connectionClosed();
    }

    /** While the last replies go out: writes what the socket takes, waiting a little for it. */
    private void awaitWritable() {
        try {
            if (key == null || !key.isValid()) {
                TimeUnit.MILLISECONDS.sleep(1);
                return;
            }
            key.interestOps(outbox.blocked() || wire.pendingOutput() ? SelectionKey.OP_WRITE : 0);
            selector.select(50);
            selector.selectedKeys().clear();
            if (outbox.blocked() || wire.pendingOutput()) {
                outbox.writable();
            }
        } catch (IOException e) {
            log.debug("connection {}: waiting to write the last replies failed", id, e);
            connection.closeChannel();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            connection.closeChannel();
        }
    }

    /** After the channel closed: everything the session held goes back (replies unsent, buffers, memory, selector). */
    void release() {
        if (outbox != null) {
            outbox.close();
        }
        if (readPipes != null) {
            readPipes.close();
        }
        if (decoder != null) {
            releasePayload(decoder.payloadSink());
        }
        if (waiting != null) {
            releasePayload(waiting.payload());
            waiting = null;
        }
        if (budget != null) {
            budget.close();
        }
        if (selector != null) {
            try {
                selector.close();
            } catch (IOException e) {
                log.debug("connection {}: closing its selector failed", id, e);
            }
        }
    }
}
