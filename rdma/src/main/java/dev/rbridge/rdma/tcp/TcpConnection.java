package dev.rbridge.rdma.tcp;

import dev.rbridge.common.Closeables;
import dev.rbridge.common.splice.Pipe;
import dev.rbridge.common.splice.SocketDescriptor;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ServerInfo;
import dev.rbridge.rdma.wire.ControlClient;
import dev.rbridge.rdma.wire.ControlPlaneConnection;
import dev.rbridge.rdma.wire.MalformedMessageException;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageEncoder;
import dev.rbridge.rdma.wire.Opcode;
import dev.rbridge.rdma.wire.Protocol;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import dev.rbridge.rdma.link.Link;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Consumer;

/**
 * The client end of a tcp-provider connection, made of its roles: requests are issued here and written by the
 * {@link RequestWriter} (by the calling thread, header and data in one gathering write, or by its flusher); the
 * {@link ReplyReader} matches replies to requests by id, reading READ data straight into the caller's buffer, on the
 * reader thread or, in caller-driven mode, on whichever waiting caller holds the read role ({@link
 * CallerDrivenReading}); the {@link Watchdog} declares the peer dead when any request waits longer than the operation
 * timeout, and everything pending then fails at once.
 */
final class TcpConnection extends ControlPlaneConnection {
    private static final Logger log = LoggerFactory.getLogger(TcpConnection.class);
    /** Queued bytes beyond which the thread reading replies writes what it issued from callbacks at once. */
    private static final long FLUSH_AT_BYTES = 1 << 20;

    private final Link channel;
    /** Our duplicate of a plain link's socket descriptor, for splicing READ data; or null (see spliceDescriptor). */
    private final SocketDescriptor descriptor;
    private final String peer;
    private final long timeoutNanos;
    /** Shared by the lanes of one {@link TcpLanes} connection. */
    private final ConnectionStats stats;
    /** Bytes of requests and replies not yet answered: how busy this connection is, for choosing a lane. */
    private final AtomicLong busyBytes = new AtomicLong();
    /** Told once when this connection closes, with the cause (a lane's failure closes its siblings). */
    private volatile Consumer<RemoteMemoryException> onClosed;
    /** Request ids, the calls waiting for replies, and what a reply means. */
    private final ControlClient control;
    private final RequestWriter writer;
    private final ReplyReader reader;
    /** Caller-driven completion, or null: the reader thread reads every reply. */
    private final CallerDrivenReading role;
    private final Watchdog watchdog;
    private final Thread readerThread;

    private TcpConnection(Link channel, String peer, long timeoutNanos, ServerInfo server,
            ConnectionStats stats, boolean callerDriven) throws IOException {
        super(server, "memserver " + peer);
        this.channel = channel;
        this.peer = peer;
        this.timeoutNanos = timeoutNanos;
        this.stats = stats;
        this.control = new ControlClient(peer);
        this.descriptor = spliceDescriptor(channel, peer);
        try {
            this.writer = new RequestWriter(channel, peer, this::isOpen, e -> closeWith(new RemoteMemoryException(
                    Status.CONNECTION_LOST, "lost memserver " + peer + " while sending: " + e.getMessage(), e)),
                    this::unsendable);
            this.reader = new ReplyReader(channel, descriptor, peer, control, writer, stats, busyBytes);
            this.role = callerDriven ? new CallerDrivenReading(reader, control, timeoutNanos, this::isOpen,
                    this::readFailed, this::readerThread) : null;
            this.readerThread = new ReaderThread(callerDriven ? role::readerLoop : this::readLoop,
                    "rdma-tcp-reader-" + peer);
            readerThread.setDaemon(true);
            this.watchdog = new Watchdog(control, reader, timeoutNanos, peer, this::isOpen,
                    this::declareDead);
        } catch (IOException | RuntimeException e) {
            if (descriptor != null) {
                descriptor.close(); // it would keep the memserver's socket open
            }
            throw e;
        }
        writer.start();
        readerThread.start();
    }

    /**
     * Our own descriptor of a plain link's socket, for splicing READ data; null over TLS (the data is encrypted), and
     * when it cannot be had (no native access), which only costs the copy.
     */
    private static SocketDescriptor spliceDescriptor(Link link, String peer) {
        if (!(link instanceof Link.Plain) || Pipe.unavailable() != null) {
            return null;
        }
        try {
            return SocketDescriptor.of(link.socket());
        } catch (IOException | RuntimeException e) {
            log.debug("connection to {}: reads are copied, not spliced: {}", peer, e.toString());
            return null;
        }
    }

    static TcpConnection connect(ConnectParams params) throws RemoteMemoryException {
        return connect(params, params.clientName(), new ConnectionStats());
    }

    /** One connection presenting itself as {@code clientName}, counting into {@code stats}. */
    static TcpConnection connect(ConnectParams params, String clientName, ConnectionStats stats)
            throws RemoteMemoryException {
        String peer = params.address().getHostString() + ":" + params.address().getPort();
        SocketChannel ch;
        try {
            ch = SocketChannel.open();
        } catch (IOException e) {
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "cannot open a socket: " + e.getMessage(), e);
        }
        // One guard covers connect and hello: a peer that accepts but never answers is cut off, not waited on.
        ScheduledFuture<?> guard = TcpProvider.TIMER.schedule(() -> Closeables.closeQuietly(ch),
                params.connectTimeout().toMillis(), TimeUnit.MILLISECONDS);
        try {
            TcpSockets.tune(ch);
            ch.socket().connect(params.address(), (int) params.connectTimeout().toMillis());
            TcpCongestion.apply(ch, params.tcpCongestion());
            Link link = ControlClient.link(ch, params.tls(), params.address(), peer);
            ServerInfo info = ControlClient.greet(link, peer, params.token(), clientName);
            if (!guard.cancel(false)) {
                throw new IOException("timed out");
            }
            return new TcpConnection(link, peer, params.operationTimeout().toNanos(), info, stats,
                    params.callerDriven());
        } catch (IOException e) {
            boolean timedOut = !guard.cancel(false); // the guard already ran: it closed the socket
            Closeables.closeQuietly(ch);
            String why = timedOut ? "no answer within " + params.connectTimeout().toMillis() + " ms"
                    : e.getMessage() == null ? e.toString() : e.getMessage();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "cannot reach memserver " + peer + ": " + why, e);
        } catch (RemoteMemoryException e) {
            guard.cancel(false);
            Closeables.closeQuietly(ch);
            throw e;
        }
    }

    // -------------------------------------------------------------------------------------------- data plane

    @Override
    public CompletableFuture<Void> read(RegionDescriptor region, long offset, MemorySegment dst) {
        if (!dst.isAccessibleBy(readerThread)) {
            return CompletableFuture.failedFuture(new IllegalArgumentException("a read buffer must be shared memory "
                    + "(Arena.ofShared, ofAuto or global): the provider's I/O thread fills it"));
        }
        return split(dst.byteSize(), (off, len) -> {
            MemorySegment part = dst.asSlice(off, len);
            stats.readOps.increment();
            stats.readBytes.add(len);
            return send(new Message.Read(control.nextId(), region.id(), region.key(), offset + off, (int) len),
                    null, part, null, ControlClient.NOTHING);
        });
    }

    /**
     * Splices when this connection can (a plain link whose descriptor was found) and the read is one message;
     * otherwise reads into {@code dst}.
     */
    @Override
    public CompletableFuture<Integer> readSpliced(RegionDescriptor region, long offset, MemorySegment dst,
            Pipe pipe) {
        if (descriptor == null || dst.byteSize() > Protocol.MAX_DATA || dst.byteSize() == 0) {
            return read(region, offset, dst).thenApply(v -> 0);
        }
        if (!dst.isAccessibleBy(readerThread)) {
            return CompletableFuture.failedFuture(new IllegalArgumentException("a read buffer must be shared memory "
                    + "(Arena.ofShared, ofAuto or global): the provider's I/O thread fills it"));
        }
        stats.readOps.increment();
        stats.readBytes.add(dst.byteSize());
        return send(new Message.Read(control.nextId(), region.id(), region.key(), offset, (int) dst.byteSize()),
                null, dst, pipe, ControlClient.NOTHING);
    }

    @Override
    public CompletableFuture<Void> write(RegionDescriptor region, long offset, MemorySegment src) {
        return split(src.byteSize(), (off, len) -> {
            MemorySegment part = src.asSlice(off, len);
            stats.writeOps.increment();
            stats.writeBytes.add(len);
            return send(new Message.Write(control.nextId(), region.id(), region.key(), offset + off, (int) len),
                    part, null, null, ControlClient.NOTHING);
        });
    }

    @Override
    public CompletableFuture<Void> zero(RegionDescriptor region, long offset, long length) {
        return call(ControlClient.zero(region, offset, length));
    }

    @Override
    public CompletableFuture<Void> flush() {
        // The memserver executes a connection's requests in order and answers a write only once its bytes are in
        // memory, so a FLUSH answered means everything before it is done.
        return call(ControlClient.flush());
    }

    @Override
    public ConnectionStats stats() {
        return stats;
    }

    /** Bytes of requests issued here and not answered yet. */
    long busyBytes() {
        return busyBytes.get();
    }

    /** Runs {@code hook} with the cause once this connection has closed (at once if it already has). */
    void onClosed(Consumer<RemoteMemoryException> hook) {
        onClosed = hook;
        RemoteMemoryException cause = closedCause();
        if (cause != null) {
            hook.accept(cause);
        }
    }

    /** Closes this connection with {@code cause} (a sibling lane's), failing what is pending. */
    void closeWithCause(RemoteMemoryException cause) {
        closeWith(cause);
    }

    @Override
    public String toString() {
        return "tcp connection to " + peer;
    }

    // ---------------------------------------------------------------------------------------------- internals

    private interface PartOp {
        CompletableFuture<Void> run(long offset, long length);
    }

    /** Operations above the wire's data limit go as several, completing together. */
    private static CompletableFuture<Void> split(long size, PartOp op) {
        if (size <= Protocol.MAX_DATA) {
            return op.run(0, size);
        }
        List<CompletableFuture<Void>> parts = new ArrayList<>();
        for (long off = 0; off < size; off += Protocol.MAX_DATA) {
            parts.add(op.run(off, Math.min(Protocol.MAX_DATA, size - off)));
        }
        return CallerDrivenReading.allOf(parts.toArray(CompletableFuture[]::new));
    }

    @Override
    protected <T> CompletableFuture<T> call(ControlClient.Operation<T> op) {
        return send(op.request().apply(control.nextId()), null, null, null, op.result());
    }

    /**
     * Issues {@code request}, with a WRITE's {@code data} or a READ's {@code dst}: registered as waiting for its reply,
     * then written by this thread, or left to the thread that reads replies or to the flusher (see below).
     */
    @SuppressWarnings("unchecked")
    private <T> CompletableFuture<T> send(Message request, MemorySegment data, MemorySegment dst, Pipe pipe,
            ControlClient.Result result) {
        CompletableFuture<T> dead = failedIfClosed();
        if (dead != null) {
            return dead;
        }
        long bodyLength = MessageEncoder.bodyLength(request);
        if (data == null && bodyLength > Protocol.MAX_CONTROL_BODY) {
            return CompletableFuture.failedFuture(new RemoteMemoryException(Status.BAD_REQUEST,
                    Opcode.name(request.code()) + " of " + bodyLength + " bytes is more than a memserver takes ("
                            + Protocol.MAX_CONTROL_BODY + ")"));
        }
        TcpCall p = new TcpCall(request, bodyLength, System.nanoTime() + timeoutNanos, data, dst, pipe, result,
                role != null ? role.future() : new CompletableFuture<>());
        busyBytes.addAndGet(p.weight);
        if (!control.register(p)) {
            busyBytes.addAndGet(-p.weight);
            return (CompletableFuture<T>) (CompletableFuture<?>) p.future(); // closed meanwhile: failed
        }
        long wireBytes = Protocol.HEADER + bodyLength;
        long pendingBytes = writer.enqueue(p, wireBytes);
        stats.sendMessages.increment();
        stats.sendBytes.add(wireBytes);
        if (readsReplies()) {
            if (pendingBytes >= FLUSH_AT_BYTES && !writer.writeBesideReplies()) {
                // Requests from completion callbacks otherwise wait until the reader has handled every reply it has
                // buffered, then go out together (see ReplyReader#awaitHeader).
                writer.wakeFlusher();
            }
        } else if (readsAnyReplies()) {
            // Another connection's reader (a lane's sibling, a bridge copying between memservers): blocked here
            // behind this connection's replies, it would stop reading its own, and two such readers deadlock each
            // other. It writes only what cannot block for long; the flusher takes the rest.
            if (!writer.writeBesideReplies()) {
                writer.wakeFlusher();
            }
        } else {
            writer.drain();
        }
        if (role != null) {
            role.issued(); // somebody must read the reply
        }
        return (CompletableFuture<T>) (CompletableFuture<?>) p.future();
    }

    /** {@code c} was taken off the write queue unsent: larger than any request this connection sends. */
    private void unsendable(TcpCall c) {
        if (control.remove(c)) {
            busyBytes.addAndGet(-c.weight);
            c.future().completeExceptionally(new RemoteMemoryException(Status.INTERNAL, c.what() + " of "
                    + c.encodedSize + " bytes does not fit the connection's write buffer; not sent"));
        }
    }

    /** Whether the calling thread reads this connection's replies now, and so must never block writing. */
    private boolean readsReplies() {
        return Thread.currentThread() == readerThread || (role != null && role.heldByCurrentThread());
    }

    /** Whether the calling thread reads replies of any tcp connection now. */
    private static boolean readsAnyReplies() {
        return Thread.currentThread() instanceof ReaderThread || CallerDrivenReading.driving();
    }

    private Thread readerThread() {
        return readerThread;
    }

    /** A connection's reader thread: recognisable when its callbacks issue requests on other connections. */
    private static final class ReaderThread extends Thread {
        ReaderThread(Runnable task, String name) {
            super(task, name);
        }
    }

    /** The reader thread without caller-driven mode: reads every reply until the connection fails. */
    private void readLoop() {
        try {
            while (true) {
                reader.awaitHeader(null);
                reader.readOne();
            }
        } catch (MalformedMessageException | IOException | RuntimeException e) {
            readFailed(e);
        }
    }

    /** The reply reader failed: the connection closes, and the request being read fails with it. */
    private void readFailed(Exception e) {
        TcpCall c = reader.takeCurrent();
        RemoteMemoryException inForce = closeWith(reader.failure(e));
        if (c != null) {
            c.future().completeExceptionally(inForce);
        }
    }

    /**
     * The watchdog's close: as {@link #closeWith}, but the pending operations fail on a thread of their own. Their
     * callbacks may issue on other connections and block writing there, and the timer thread must stay free to run
     * every connection's watchdog, the one that unblocks such a write included.
     */
    private void declareDead(RemoteMemoryException cause) {
        if (markClosed(cause)) {
            tearDown(cause, true);
        }
    }

    /** Closed: fails everything pending, here. */
    @Override
    protected void tearDown(RemoteMemoryException cause) {
        tearDown(cause, false);
    }

    private void tearDown(RemoteMemoryException cause, boolean failElsewhere) {
        watchdog.cancel();
        Closeables.closeQuietly(channel.socket());
        if (descriptor != null) {
            descriptor.close(); // shuts the socket down: our duplicate would keep it open
        }
        writer.wakeFlusher();
        LockSupport.unpark(readerThread);
        if (failElsewhere) {
            Thread.ofPlatform().daemon().name("rdma-tcp-fail-" + peer).start(() -> failPending(cause));
        } else {
            failPending(cause);
        }
    }

    /** Fails every pending operation of this closed connection and tells the close hook. */
    private void failPending(RemoteMemoryException cause) {
        logClosed(log, cause, control.failAll(cause));
        Consumer<RemoteMemoryException> hook = onClosed;
        if (hook != null) {
            hook.accept(cause);
        }
    }
}
