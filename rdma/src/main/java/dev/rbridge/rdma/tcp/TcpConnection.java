package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ServerInfo;
import dev.rbridge.rdma.wire.ControlClient;
import dev.rbridge.rdma.wire.MalformedMessageException;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageDecoder;
import dev.rbridge.rdma.wire.MessageEncoder;
import dev.rbridge.rdma.wire.Protocol;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The client end of a tcp-provider connection. Requests are written under a lock by the calling thread (header and
 * data in one gathering write); one reader thread matches replies to requests by id, reading READ data straight into
 * the caller's buffer. A watchdog declares the peer dead when any request waits longer than the operation timeout,
 * failing everything pending at once.
 *
 * <p>Caller-driven mode ({@link ConnectParams#callerDriven}) makes reading a role rather than a thread: whoever holds
 * {@link #readRole} reads and completes replies. A thread waiting on one of its futures takes the role when it is
 * free, or when the reader thread, polling between replies, sees it asked for ({@link #waiters}) and steps aside; it
 * gives the role back once its own reply is in. The reader thread reads only while requests are pending and nobody
 * else reads, so a synchronous caller goes request, poll, reply on its own thread, like a blocking socket client.
 */
final class TcpConnection implements RemoteConnection {
    private static final Logger log = LoggerFactory.getLogger(TcpConnection.class);
    private static final long FLUSH_AT_BYTES = 1 << 20;
    /** Most buffers in one gathering write (Linux IOV_MAX is 1024). */
    private static final int MAX_VECTOR = 1024;
    /**
     * Caller-driven mode: how often the reader thread looks for an operation that its issuer, trusted to wait on it,
     * did not wait on: about the most such an operation is late (plus any reply being read when the look comes); the
     * issuer is not trusted again until it waits.
     */
    static final long SAFETY_NANOS = 10_000_000;
    /** Empty timed looks after which the reader thread stops looking (the caller went quiet) and sleeps until woken. */
    private static final int IDLE_LOOKS = 16;

    private final SocketChannel channel;
    private final String peer;
    private final long timeoutNanos;
    private final ServerInfo server;
    /** Shared by the lanes of one {@link TcpLanes} connection. */
    private final ConnectionStats stats;
    /** Bytes of requests and replies not yet answered: how busy this connection is, for choosing a lane. */
    private final AtomicLong busyBytes = new AtomicLong();
    /** Told once when this connection closes, with the cause (a lane's failure closes its siblings). */
    private volatile java.util.function.Consumer<RemoteMemoryException> onClosed;
    /** Request ids, the calls waiting for replies, and what a reply means. */
    private final ControlClient control;
    /** Reads the replies; used by the role holder only. */
    private final MessageDecoder decoder = MessageDecoder.forClient();
    private final ReentrantLock writeLock = new ReentrantLock();
    /** Requests not yet written, in issue order (FIFO keeps FLUSH behind what was issued before it). */
    private final ConcurrentLinkedQueue<Pending> outgoing = new ConcurrentLinkedQueue<>();
    private final AtomicLong outgoingBytes = new AtomicLong();
    /** Reply bytes of requests written and not yet answered: what the memserver may send before reading more. */
    private final AtomicLong writtenReplyBytes = new AtomicLong();
    /**
     * Request bytes, weighed as the kernel charges them, of requests written and not yet answered: an upper bound on
     * what sits in our socket's send buffer (the reply to a request acknowledges its bytes).
     */
    private final AtomicLong writtenRequestBytes = new AtomicLong();
    /**
     * Most reply bytes that may be outstanding when the thread reading replies writes a request itself: a quarter of
     * the socket's receive buffer as the kernel reports it (twice the {@link TcpSockets#SOCKET_BUFFER} asked for, of which
     * part goes to bookkeeping), so that the memserver can always write every reply it owes without blocking, and so
     * always goes on reading what we write. The size is fixed (set explicitly, so the kernel does not autotune it).
     */
    private final long safeReplyBytes;
    /**
     * Most request bytes that may be outstanding when the thread reading replies writes a request itself: a quarter of
     * the socket's send buffer as reported, so that the write fits in it whatever the memserver does.
     */
    private final long safeRequestBytes;
    /** Where a batch's requests are encoded (WRITE data apart); used only under writeLock. */
    private final ByteBuffer out = ByteBuffer.allocateDirect(64 << 10).order(ByteOrder.LITTLE_ENDIAN);
    /** The gathering write's buffers; used only under writeLock. */
    private final ByteBuffer[] vector = new ByteBuffer[MAX_VECTOR];
    private final ByteBuffer in = ByteBuffer.allocateDirect(256 << 10).order(ByteOrder.LITTLE_ENDIAN).flip();
    private final AtomicReference<RemoteMemoryException> closed = new AtomicReference<>();
    private final ScheduledFuture<?> watchdog;
    private final Thread reader;
    /**
     * Writes what the reader's completion callbacks issue beyond what the reader may write itself (see
     * {@link #writeBesideReplies}): a reader blocked in a write the memserver's replies are stuck behind deadlocks.
     */
    private final Thread flusher;
    /** Caller-driven completion (see the class comment). */
    private final boolean callerDriven;
    /** The right to read replies, in caller-driven mode: held by the reader thread or by one waiting caller. */
    private final ReentrantLock readRole = new ReentrantLock();
    /** Callers asking for {@link #readRole}: the reader thread steps aside at its next wait for input. */
    private final AtomicInteger waiters = new AtomicInteger();
    /** The role holder is blocked in a read and cannot step aside: callers wait for it instead. */
    private volatile boolean readerBlocked;
    /** For the reader thread's polls: a caller wants the read role. */
    private final java.util.function.BooleanSupplier askedFor = () -> waiters.get() > 0;
    /**
     * The request whose reply is being read: no longer in the map, so failed by the role holder if need be, and
     * watched by {@link #checkDeadlines} (a memserver that stops in the middle of a reply leaves its reader blocked).
     */
    private volatile Pending current;
    /**
     * The thread that last waited on an operation. Trusted to wait on its next one too, so issuing one wakes nobody;
     * the reader thread then looks for operations nobody waits on every {@link #SAFETY_NANOS} instead.
     */
    private volatile Thread lastDriver;
    /** The reader thread woke from a timed look rather than being woken. Reader thread only. */
    private boolean safetyWake;
    /** Timed looks in a row that found nothing pending. Reader thread only. */
    private int idleWakes;

    /** A request waiting for its reply, and until it is written, waiting in {@link #outgoing}. */
    private static final class Pending extends ControlClient.Call {
        final Message request;
        /** What {@link MessageEncoder} writes of {@link #request} into the batch buffer. */
        final int encodedSize;
        /** A WRITE's data, the caller's memory, written after the request; or null. */
        final ByteBuffer data;
        /** A READ's destination, the caller's memory; or null. */
        final MemorySegment dst;
        /** What it adds to {@link #busyBytes} until answered. */
        final long weight;
        /** What it may take of our socket's send buffer until answered (see {@link #sendWeight}). */
        final long requestWeight;
        /**
         * What its reply may take of our socket's receive buffer: header and READ data, but at least a page, since a
         * small reply that arrives alone occupies a whole socket buffer (~1 KiB of kernel memory for 24 bytes).
         */
        final long replyWeight;

        /** {@code bodyLength}: the request's, {@link MessageEncoder#bodyLength} (WRITE data included). */
        Pending(Message request, long bodyLength, long deadline, MemorySegment data, MemorySegment dst,
                ControlClient.Result result, CompletableFuture<Object> future) {
            super(request.id(), request.code(), deadline, future, result);
            this.request = request;
            this.data = data == null ? null : data.asByteBuffer();
            this.encodedSize = (int) (Protocol.HEADER + bodyLength - (data == null ? 0 : data.byteSize()));
            this.dst = dst;
            long requestBytes = Protocol.HEADER + bodyLength;
            this.weight = requestBytes + (dst == null ? 0 : dst.byteSize());
            this.requestWeight = sendWeight(requestBytes);
            this.replyWeight = request instanceof Message.ListRegions ? Protocol.MAX_BODY // a long list of regions
                    : Math.max(4096, Protocol.HEADER + (dst == null ? 0 : dst.byteSize()));
        }
    }

    /**
     * What {@code bytes} written in one request may take of a socket's send buffer: the kernel charges buffer
     * overhead too (about a KiB per packet buffer), so at least a page, and a sixteenth more for large writes.
     */
    static long sendWeight(long bytes) {
        return Math.max(4096, bytes + bytes / 16);
    }

    /** The last reply carried large READ data: read only the next header, so that its data skips {@code in}. */
    private boolean afterLarge;
    /** Polls briefly before the reader blocks; used by the reader only. */
    private final Spinner spinner;

    private TcpConnection(SocketChannel channel, String peer, long timeoutNanos, ServerInfo server,
                          ConnectionStats stats, boolean callerDriven) throws IOException {
        this.channel = channel;
        this.stats = stats;
        this.callerDriven = callerDriven;
        this.control = new ControlClient(peer);
        this.spinner = new Spinner(channel.socket().getInputStream(), control::issued);
        this.safeReplyBytes = channel.getOption(java.net.StandardSocketOptions.SO_RCVBUF) / 4;
        this.safeRequestBytes = channel.getOption(java.net.StandardSocketOptions.SO_SNDBUF) / 4;
        this.peer = peer;
        this.timeoutNanos = timeoutNanos;
        this.server = server;
        long period = Math.max(10, Math.min(100, TimeUnit.NANOSECONDS.toMillis(timeoutNanos) / 4));
        this.watchdog = TcpProvider.TIMER.scheduleWithFixedDelay(this::checkDeadlines, period, period,
                TimeUnit.MILLISECONDS);
        this.reader = new ReaderThread(callerDriven ? this::driveLoop : this::readLoop, "rdma-tcp-reader-" + peer);
        reader.setDaemon(true);
        this.flusher = new Thread(this::flushLoop, "rdma-tcp-flusher-" + peer);
        flusher.setDaemon(true);
        flusher.start();
        reader.start();
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
        ScheduledFuture<?> guard = TcpProvider.TIMER.schedule(() -> TcpSockets.closeQuietly(ch),
                params.connectTimeout().toMillis(), TimeUnit.MILLISECONDS);
        try {
            TcpSockets.tune(ch);
            ch.socket().connect(params.address(), (int) params.connectTimeout().toMillis());
            TcpCongestion.apply(ch, params.tcpCongestion());
            ServerInfo info = ControlClient.greet(ch, peer, params.token(), clientName);
            if (!guard.cancel(false)) {
                throw new IOException("timed out");
            }
            return new TcpConnection(ch, peer, params.operationTimeout().toNanos(), info, stats,
                    params.callerDriven());
        } catch (IOException e) {
            boolean timedOut = !guard.cancel(false); // the guard already ran: it closed the socket
            TcpSockets.closeQuietly(ch);
            String why = timedOut ? "no answer within " + params.connectTimeout().toMillis() + " ms"
                    : e.getMessage() == null ? e.toString() : e.getMessage();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "cannot reach memserver " + peer + ": " + why, e);
        } catch (RemoteMemoryException e) {
            guard.cancel(false);
            TcpSockets.closeQuietly(ch);
            throw e;
        }
    }

    // ------------------------------------------------------------------------------------------------ the API

    @Override
    public ServerInfo server() {
        return server;
    }

    @Override
    public CompletableFuture<RegionDescriptor> allocate(RegionTag tag, long length) {
        return call(ControlClient.allocate(tag, length));
    }

    @Override
    public CompletableFuture<RegionDescriptor> open(long regionId) {
        return call(ControlClient.open(regionId));
    }

    @Override
    public CompletableFuture<List<RegionInfo>> list() {
        return call(ControlClient.list());
    }

    @Override
    public CompletableFuture<Void> release(RegionDescriptor region) {
        return call(ControlClient.release(region));
    }

    @Override
    public CompletableFuture<RegionDescriptor> retag(RegionDescriptor region, RegionTag tag) {
        return call(ControlClient.retag(region, tag));
    }

    @Override
    public CompletableFuture<Lease> lease(String volume, String owner, Duration ttl) {
        return call(ControlClient.lease(volume, owner, ttl));
    }

    @Override
    public CompletableFuture<Void> unlease(String volume, String owner) {
        return call(ControlClient.unlease(volume, owner));
    }

    @Override
    public CompletableFuture<ServerInfo> info() {
        return call(ControlClient.info());
    }

    @Override
    public CompletableFuture<Void> read(RegionDescriptor region, long offset, MemorySegment dst) {
        if (!dst.isAccessibleBy(reader)) {
            return CompletableFuture.failedFuture(new IllegalArgumentException("a read buffer must be shared memory "
                    + "(Arena.ofShared, ofAuto or global): the provider's I/O thread fills it"));
        }
        return split(dst.byteSize(), (off, len) -> {
            MemorySegment part = dst.asSlice(off, len);
            stats.readOps.increment();
            stats.readBytes.add(len);
            return send(new Message.Read(control.nextId(), region.id(), region.key(), offset + off, (int) len),
                    null, part, ControlClient.NOTHING);
        });
    }

    @Override
    public CompletableFuture<Void> write(RegionDescriptor region, long offset, MemorySegment src) {
        return split(src.byteSize(), (off, len) -> {
            MemorySegment part = src.asSlice(off, len);
            stats.writeOps.increment();
            stats.writeBytes.add(len);
            return send(new Message.Write(control.nextId(), region.id(), region.key(), offset + off, (int) len),
                    part, null, ControlClient.NOTHING);
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
    void onClosed(java.util.function.Consumer<RemoteMemoryException> hook) {
        onClosed = hook;
        RemoteMemoryException cause = closed.get();
        if (cause != null) {
            hook.accept(cause);
        }
    }

    /** Closes this connection with {@code cause} (a sibling lane's), failing what is pending. */
    void closeWithCause(RemoteMemoryException cause) {
        closeWith(cause);
    }

    @Override
    public boolean isOpen() {
        return closed.get() == null;
    }

    @Override
    public void close() {
        closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, "connection to memserver " + peer
                + " was closed by this client"));
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
        return allOf(parts.toArray(CompletableFuture[]::new));
    }

    /**
     * {@link CompletableFuture#allOf}, except that in caller-driven mode a thread waiting on the result reads the
     * parts' replies, as it would waiting on one part; otherwise nobody it trusts to wait would read them, and they
     * would wait for the reader thread's next timed look.
     */
    static CompletableFuture<Void> allOf(CompletableFuture<?>[] parts) {
        CompletableFuture<Void> all = CompletableFuture.allOf(parts);
        for (CompletableFuture<?> part : parts) {
            if (part instanceof TcpConnection.DrivenFuture<?>) {
                AllOf joined = new AllOf(parts);
                all.whenComplete((v, t) -> {
                    if (t == null) {
                        joined.complete(null);
                    } else {
                        joined.completeExceptionally(t);
                    }
                });
                return joined;
            }
        }
        return all;
    }

    /** See {@link #allOf}. */
    private static final class AllOf extends CompletableFuture<Void> {
        private final CompletableFuture<?>[] parts;

        AllOf(CompletableFuture<?>[] parts) {
            this.parts = parts;
        }

        /**
         * Reads each connection's replies until all its parts are done, holding the read role throughout: driving the
         * parts one by one would hand the role to the reader thread between them (a caller that lets go of it with
         * operations pending wakes that thread), which then completes the rest.
         */
        private void driveParts(long waitNanos) {
            java.util.Map<TcpConnection, List<CompletableFuture<?>>> byConnection = new java.util.IdentityHashMap<>();
            for (CompletableFuture<?> part : parts) {
                if (part instanceof TcpConnection.DrivenFuture<?> d) {
                    byConnection.computeIfAbsent(d.connection(), k -> new ArrayList<>()).add(d);
                }
            }
            byConnection.forEach((connection, own) -> connection.driveFor(own.size() == 1 ? own.getFirst()
                    : CompletableFuture.allOf(own.toArray(CompletableFuture[]::new)), waitNanos));
        }

        @Override
        public Void get() throws InterruptedException, ExecutionException {
            driveParts(Long.MAX_VALUE);
            return super.get();
        }

        @Override
        public Void get(long timeout, TimeUnit unit) throws InterruptedException, ExecutionException, TimeoutException {
            driveParts(unit.toNanos(timeout));
            return super.get(timeout, unit);
        }

        @Override
        public Void join() {
            driveParts(Long.MAX_VALUE);
            return super.join();
        }
    }

    private <T> CompletableFuture<T> call(ControlClient.Operation<T> op) {
        return send(op.request().apply(control.nextId()), null, null, op.result());
    }

    /**
     * Issues {@code request}, with a WRITE's {@code data} or a READ's {@code dst}: registered as waiting for its reply,
     * then written by this thread, or left to the thread that reads replies or to the flusher (see below).
     */
    @SuppressWarnings("unchecked")
    private <T> CompletableFuture<T> send(Message request, MemorySegment data, MemorySegment dst,
                                          ControlClient.Result result) {
        RemoteMemoryException dead = closed.get();
        if (dead != null) {
            return CompletableFuture.failedFuture(dead);
        }
        long bodyLength = MessageEncoder.bodyLength(request);
        if (data == null && bodyLength > Protocol.MAX_CONTROL_BODY) {
            return CompletableFuture.failedFuture(new RemoteMemoryException(Status.BAD_REQUEST, request.getClass()
                    .getSimpleName().toUpperCase(java.util.Locale.ROOT) + " of " + bodyLength
                    + " bytes is more than a memserver takes (" + Protocol.MAX_CONTROL_BODY + ")"));
        }
        Pending p = new Pending(request, bodyLength, System.nanoTime() + timeoutNanos, data, dst, result,
                callerDriven ? new DrivenFuture<>() : new CompletableFuture<>());
        busyBytes.addAndGet(p.weight);
        if (!control.register(p)) {
            busyBytes.addAndGet(-p.weight);
            return (CompletableFuture<T>) (CompletableFuture<?>) p.future(); // closed meanwhile: failed
        }
        outgoing.add(p);
        long wireBytes = Protocol.HEADER + bodyLength;
        long pendingBytes = outgoingBytes.addAndGet(wireBytes);
        stats.sendMessages.increment();
        stats.sendBytes.add(wireBytes);
        if (readsReplies()) {
            if (pendingBytes >= FLUSH_AT_BYTES && !writeBesideReplies()) {
                // Requests from completion callbacks otherwise wait until the reader has handled every reply it has
                // buffered, then go out together (see ensure).
                LockSupport.unpark(flusher);
            }
        } else if (readsAnyReplies()) {
            // Another connection's reader (a lane's sibling, a bridge copying between memservers): blocked here
            // behind this connection's replies, it would stop reading its own, and two such readers deadlock each
            // other. It writes only what cannot block for long; the flusher takes the rest.
            if (!writeBesideReplies()) {
                LockSupport.unpark(flusher);
            }
        } else {
            drainOutgoing();
        }
        if (callerDriven && !readRole.isLocked() && lastDriver != Thread.currentThread()) {
            // Somebody must read the reply: the reader thread, unless a waiting caller takes the role first. A holder
            // that lets go re-checks pending after unlocking, so skipping the wake here while it holds is safe; so is
            // skipping it for the last driver, whom the reader thread's timed look backs up.
            LockSupport.unpark(reader);
        }
        return (CompletableFuture<T>) (CompletableFuture<?>) p.future();
    }

    /**
     * Writes what is queued, combining: whoever gets the lock writes everyone's requests; a thread that finds the
     * lock taken leaves its request to the holder, who looks again after unlocking. Never called by the reader: a
     * reader blocked in a write, while the memserver blocks writing replies it does not read, is the classic
     * deadlock of a full-duplex stream.
     */
    private void drainOutgoing() {
        while (!outgoing.isEmpty() && writeLock.tryLock()) {
            try {
                writeBatch();
            } catch (IOException e) {
                closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, "lost memserver " + peer
                        + " while sending: " + e.getMessage(), e));
            } finally {
                writeLock.unlock();
            }
        }
        if (closed.get() != null) {
            outgoing.clear();
        }
    }

    /**
     * The thread that reads replies writing queued requests itself (saving a hand-off to the flusher per request), as
     * far as that is safe, which is either of:
     * <ul>
     * <li>the replies owed, this batch's included, fit in {@link #safeReplyBytes}: the memserver answers in order, so
     * while this thread is blocked in the write it can only owe replies that fit in our receive buffer; it never
     * blocks writing them and so never stops reading what we write (large WRITEs: small replies);
     * <li>the requests not yet answered, this batch included, fit in {@link #safeRequestBytes}: every byte not yet
     * acknowledged fits in our send buffer, so the write returns whatever the memserver does (READs: small requests).
     * </ul>
     * True when nothing is left for the flusher.
     */
    private boolean writeBesideReplies() {
        if (!writeLock.tryLock()) {
            return false;
        }
        try {
            writeBatch(safeReplyBytes - writtenReplyBytes.get(), safeRequestBytes - writtenRequestBytes.get());
        } catch (IOException e) {
            closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, "lost memserver " + peer
                    + " while sending: " + e.getMessage(), e));
            return true;
        } finally {
            writeLock.unlock();
        }
        return outgoing.isEmpty();
    }

    private void flushLoop() {
        while (closed.get() == null) {
            if (outgoing.isEmpty()) {
                LockSupport.park(this);
                continue;
            }
            writeLock.lock(); // the flusher may wait: it is not the thread that reads replies
            try {
                while (!outgoing.isEmpty()) {
                    writeBatch();
                }
            } catch (IOException e) {
                closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, "lost memserver " + peer
                        + " while sending: " + e.getMessage(), e));
            } finally {
                writeLock.unlock();
            }
            drainOutgoing(); // anything queued while we were unlocking
        }
    }

    /** Writes queued requests: encoded together into one direct buffer, WRITE data straight from the caller. */
    private void writeBatch() throws IOException {
        writeBatch(Long.MAX_VALUE, Long.MAX_VALUE);
    }

    /**
     * As {@link #writeBatch()}, taking requests only while the reply bytes they will bring stay within
     * {@code replyBudget} or the request bytes written stay within {@code requestBudget} (see
     * {@link #writeBesideReplies}): checked for each prefix of the batch, so the whole batch meets one of the two.
     */
    private void writeBatch(long replyBudget, long requestBudget) throws IOException {
        ByteBuffer[] v = vector;
        long replies = 0;
        long requests = 0;
        int n = 0;
        long bytes = 0;
        out.clear();
        int headStart = 0;
        Pending o;
        while (n < MAX_VECTOR - 1 && (o = outgoing.peek()) != null && o.encodedSize <= out.remaining()
                && (replies + o.replyWeight <= replyBudget || requests + o.requestWeight <= requestBudget)) {
            outgoing.poll();
            replies += o.replyWeight;
            requests += o.requestWeight;
            bytes += o.encodedSize;
            MessageEncoder.encode(o.request, out);
            if (o.data != null) {
                v[n++] = out.slice(headStart, out.position() - headStart);
                headStart = out.position();
                v[n++] = o.data;
                bytes += o.data.remaining();
            }
        }
        if (out.position() > headStart) {
            v[n++] = out.slice(headStart, out.position() - headStart);
        }
        outgoingBytes.addAndGet(-bytes);
        writtenReplyBytes.addAndGet(replies); // before the bytes go: a reply can come back before write returns
        writtenRequestBytes.addAndGet(requests);
        int first = 0;
        try {
            while (first < n) {
                channel.write(v, first, n - first);
                while (first < n && !v[first].hasRemaining()) {
                    first++;
                }
            }
        } finally {
            Arrays.fill(v, 0, n, null); // keep no caller's buffer reachable
        }
    }

    /** Whether the calling thread reads this connection's replies now, and so must never block writing. */
    private boolean readsReplies() {
        return Thread.currentThread() == reader || (callerDriven && readRole.isHeldByCurrentThread());
    }

    /** Whether the calling thread reads replies of any tcp connection now. */
    private static boolean readsAnyReplies() {
        return Thread.currentThread() instanceof ReaderThread || DRIVING.get()[0] > 0;
    }

    /** A connection's reader thread: recognisable when its callbacks issue requests on other connections. */
    private static final class ReaderThread extends Thread {
        ReaderThread(Runnable task, String name) {
            super(task, name);
        }
    }

    /** How many connections the calling thread is reading for as a caller (caller-driven mode). */
    private static final ThreadLocal<int[]> DRIVING = ThreadLocal.withInitial(() -> new int[1]);

    /** Makes {@code n} bytes readable in {@code in}, sending queued requests before blocking. */
    private void ensure(int n) throws IOException {
        while (in.remaining() < n) {
            if (!outgoing.isEmpty() && !writeBesideReplies()) {
                LockSupport.unpark(flusher); // the rest: we must not block writing what could stall the replies
            }
            spinner.await();
            TcpSockets.readMore(channel, in, afterLarge ? n : Integer.MAX_VALUE);
        }
    }

    private void readLoop() {
        try {
            while (true) {
                ensure(Protocol.HEADER);
                readOne();
            }
        } catch (MalformedMessageException | IOException | RuntimeException e) {
            readFailed(e);
        }
    }

    /** The reader thread in caller-driven mode: reads while requests are pending and no waiting caller wants to. */
    private void driveLoop() {
        while (closed.get() == null) {
            if (control.idle() || waiters.get() > 0 || !readRole.tryLock()) {
                parkIdle();
                continue;
            }
            if (safetyWake) {
                lastDriver = null; // it issued an operation and did not wait on it: wake for its next ones
            }
            idleWakes = 0;
            try {
                while (!control.idle() && awaitHeader(true)) {
                    readOne();
                }
            } catch (MalformedMessageException | IOException | RuntimeException e) {
                readFailed(e);
            } finally {
                readRole.unlock();
            }
        }
    }

    /** The reader thread, caller-driven, with nothing to do: sleeps until woken, or looks again shortly. */
    private void parkIdle() {
        if (lastDriver == null) {
            safetyWake = false;
            LockSupport.park(this); // send, a caller giving the role back, or close wakes it
            return;
        }
        long start = System.nanoTime();
        LockSupport.parkNanos(this, SAFETY_NANOS);
        safetyWake = System.nanoTime() - start >= SAFETY_NANOS;
        if (!safetyWake) {
            return;
        }
        if (!control.idle()) {
            idleWakes = 0;
        } else if (++idleWakes >= IDLE_LOOKS) {
            lastDriver = null;
            idleWakes = 0;
        }
    }

    /**
     * Reads replies until {@code f} (this connection's operations only) completes, for a caller about to wait up to
     * {@code waitNanos} on it; a shorter wait than the operation timeout could not be kept while blocked in a read.
     */
    private void driveFor(CompletableFuture<?> f, long waitNanos) {
        if (waitNanos >= timeoutNanos) {
            drive(f); // the watchdog bounds this one
        }
    }

    /**
     * A caller waiting on {@code f} reads replies itself until {@code f} completes, if it can take the read role
     * within the polling budget; otherwise it returns and the caller waits as usual.
     */
    private void drive(CompletableFuture<?> f) {
        if (readsReplies() || Thread.currentThread().isInterrupted()) {
            return; // an interrupted thread must not touch the socket: its read would close it
        }
        if (lastDriver != Thread.currentThread()) {
            // It waits on what it issues (even when the reply was in before it came to wait, or another reader
            // completes it): trusted from now on. The reader thread moves from its untimed sleep to timed looks.
            lastDriver = Thread.currentThread();
            LockSupport.unpark(reader);
        }
        if (f.isDone() || !takeReadRole(f)) {
            return;
        }
        int[] driving = DRIVING.get();
        driving[0]++;
        try {
            while (!f.isDone() && awaitHeader(false)) {
                readOne();
            }
        } catch (MalformedMessageException | IOException | RuntimeException e) {
            readFailed(e);
        } finally {
            driving[0]--;
            readRole.unlock();
            if (!control.idle()) {
                LockSupport.unpark(reader); // other callers' replies: the reader thread takes over
            }
        }
    }

    private boolean takeReadRole(CompletableFuture<?> f) {
        waiters.incrementAndGet();
        boolean taken = false;
        try {
            long start = System.nanoTime();
            while (!f.isDone() && closed.get() == null) {
                if (readRole.tryLock()) {
                    taken = true;
                    return true;
                }
                if (readerBlocked || System.nanoTime() - start > Spinner.BUDGET_NANOS) {
                    return false; // the holder cannot step aside now: it completes f
                }
                Thread.yield();
            }
            return false;
        } finally {
            waiters.decrementAndGet();
            if (!taken && !control.idle() && !readRole.isLocked()) {
                LockSupport.unpark(reader); // it may have stepped aside for us and parked
            }
        }
    }

    /**
     * Caller-driven mode: makes a header readable in {@code in}, polling the socket first as {@link Spinner} does
     * (so a run of polls that find nothing turns into blocking at once, as on a CPU shared with the memserver, where
     * yielding does not reliably let it run). With {@code mayStepAside} (the reader thread) it returns false instead
     * when a caller asks for the role.
     */
    private boolean awaitHeader(boolean mayStepAside) throws IOException {
        while (in.remaining() < Protocol.HEADER) {
            if (!outgoing.isEmpty() && !writeBesideReplies()) {
                LockSupport.unpark(flusher); // the rest: we must not block writing what could stall the replies
            }
            if (mayStepAside && waiters.get() > 0) {
                return false;
            }
            int upTo = afterLarge ? Protocol.HEADER : Integer.MAX_VALUE;
            if (spinner.await(mayStepAside ? askedFor : null)) {
                TcpSockets.readMore(channel, in, upTo);
            } else if (!(mayStepAside && waiters.get() > 0)) {
                readerBlocked = true;
                try {
                    TcpSockets.readMore(channel, in, upTo);
                } finally {
                    readerBlocked = false;
                }
            }
        }
        return true;
    }

    /**
     * Reads one reply, whose header is in {@code in}, and completes its request: READ data straight into the
     * caller's memory. Called by the role holder only.
     */
    private void readOne() throws IOException, MalformedMessageException {
        Message m;
        while ((m = decoder.next(in)) == null) {
            TcpSockets.readMore(channel, in); // the rest of a body: a reply is sent whole, so it is coming
        }
        if (!(control.take(m.id()) instanceof Pending p)) {
            throw new MalformedMessageException("reply to unknown request " + m.id());
        }
        busyBytes.addAndGet(-p.weight);
        writtenReplyBytes.addAndGet(-p.replyWeight);
        writtenRequestBytes.addAndGet(-p.requestWeight);
        stats.recvMessages.increment();
        stats.recvBytes.add(Protocol.HEADER + (long) decoder.length());
        if (m instanceof Message.ReadReply r) {
            if (p.dst == null || r.length() != p.dst.byteSize()) {
                throw new MalformedMessageException("READ reply of " + r.length() + " bytes for "
                        + (p.dst == null ? "a " + p.what() : p.dst.byteSize() + " requested"));
            }
            current = p; // watched by the watchdog while its data comes in
            ByteBuffer dst = p.dst.asByteBuffer();
            int buffered = Math.min(in.remaining(), r.length());
            dst.put(in.slice(in.position(), buffered));
            in.position(in.position() + buffered);
            TcpSockets.readFully(channel, dst); // the rest, if any, straight from the socket
            decoder.payloadMoved(r.length());
            afterLarge = r.length() >= TcpSockets.LARGE;
            current = null;
            p.future().complete(null);
        } else {
            afterLarge = false;
            control.answer(p, m);
        }
    }

    /** The role holder's read failed: the connection closes, and the request being read fails with it. */
    private void readFailed(Exception e) {
        Pending p = current;
        current = null;
        RemoteMemoryException cause;
        if (e instanceof MalformedMessageException) {
            cause = new RemoteMemoryException(Status.CONNECTION_LOST, "memserver " + peer + " sent a malformed reply ("
                    + e.getMessage() + "); connection closed");
        } else if (e instanceof EOFException) {
            cause = new RemoteMemoryException(Status.CONNECTION_LOST, "memserver " + peer + " closed the connection");
        } else if (e instanceof ClosedByInterruptException) {
            cause = new RemoteMemoryException(Status.CONNECTION_LOST, "connection to memserver " + peer
                    + " closed: a caller reading its replies (caller-driven completion) was interrupted", e);
        } else if (e instanceof IOException) {
            cause = new RemoteMemoryException(Status.CONNECTION_LOST, "lost memserver " + peer + ": "
                    + e.getMessage(), e);
        } else {
            log.error("tcp reader for {} failed", peer, e);
            cause = new RemoteMemoryException(Status.CONNECTION_LOST, "internal error reading from " + peer, e);
        }
        if (p != null) {
            p.future().completeExceptionally(closeWith(cause));
        } else {
            closeWith(cause);
        }
    }

    /** A request's future that, waited on, lets the waiting thread read the replies (caller-driven mode). */
    final class DrivenFuture<T> extends CompletableFuture<T> {
        TcpConnection connection() {
            return TcpConnection.this;
        }

        @Override
        public T get() throws InterruptedException, ExecutionException {
            drive(this);
            return super.get();
        }

        @Override
        public T get(long timeout, TimeUnit unit) throws InterruptedException, ExecutionException, TimeoutException {
            driveFor(this, unit.toNanos(timeout));
            return super.get(timeout, unit);
        }

        @Override
        public T join() {
            drive(this);
            return super.join();
        }
    }

    private void checkDeadlines() {
        if (closed.get() != null) {
            return;
        }
        long now = System.nanoTime();
        Pending reading = current;
        if (reading != null && now - reading.deadline() > 0) {
            closeWith(new RemoteMemoryException(Status.TIMEOUT, "memserver " + peer + " did not finish its "
                    + reading.what() + " reply within " + TimeUnit.NANOSECONDS.toMillis(timeoutNanos)
                    + " ms (it stopped in the middle); connection declared dead"), true);
            return;
        }
        ControlClient.Call late = control.overdue(now);
        if (late != null) {
            closeWith(control.timeout(late, timeoutNanos), true);
        }
    }

    /** Closes once, failing everything pending; returns the cause in force (the first one). */
    private RemoteMemoryException closeWith(RemoteMemoryException cause) {
        return closeWith(cause, false);
    }

    /**
     * As {@link #closeWith(RemoteMemoryException)}; with {@code failElsewhere} (the watchdog), the pending operations
     * fail on a thread of their own. Their callbacks may issue on other connections and block writing there, and the
     * timer thread must stay free to run every connection's watchdog, the one that unblocks such a write included.
     */
    private RemoteMemoryException closeWith(RemoteMemoryException cause, boolean failElsewhere) {
        if (!closed.compareAndSet(null, cause)) {
            return closed.get();
        }
        watchdog.cancel(false);
        TcpSockets.closeQuietly(channel);
        LockSupport.unpark(flusher);
        LockSupport.unpark(reader);
        if (failElsewhere) {
            Thread.ofPlatform().daemon().name("rdma-tcp-fail-" + peer).start(() -> failPending(cause));
        } else {
            failPending(cause);
        }
        return cause;
    }

    /** Fails every pending operation of this closed connection and tells the close hook. */
    private void failPending(RemoteMemoryException cause) {
        int failed = control.failAll(cause);
        if (cause.status() != Status.CONNECTION_LOST || failed > 0) {
            log.warn("{} ({} pending operation(s) failed)", cause.getMessage(), failed);
        } else {
            log.debug("{}", cause.getMessage());
        }
        java.util.function.Consumer<RemoteMemoryException> hook = onClosed;
        if (hook != null) {
            hook.accept(cause);
        }
    }
}
