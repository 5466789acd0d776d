package dev.rbridge.rdma.ucx;

import dev.rbridge.common.Closeables;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ServerInfo;
import dev.rbridge.rdma.link.Link;
import dev.rbridge.rdma.ucx.UcxDataOp.Kind;
import dev.rbridge.rdma.wire.ControlClient;
import dev.rbridge.rdma.wire.ControlPlaneConnection;
import dev.rbridge.rdma.wire.MalformedMessageException;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageDecoder;
import dev.rbridge.rdma.wire.MessageEncoder;
import dev.rbridge.rdma.wire.MessageReader;
import dev.rbridge.rdma.wire.Opcode;
import dev.rbridge.rdma.wire.Protocol;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpEndpointParams;
import org.openucx.jucx.ucp.UcpRequest;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The client end of a ucx-provider connection. Control operations go over a TCP connection (one reader thread matches
 * replies by id); READ and WRITE are UCX GET and PUT from the caller's memory straight to the region, on one UCX
 * worker whose progress thread alone touches it. Callers queue operations; the progress thread posts everything
 * queued, then one endpoint flush for the PUTs of that batch ({@link UcxOperationQueue}): a write completes when that
 * flush does (remote completion: the bytes are in the memserver's memory), so a burst of writes costs one flush, not
 * one each.
 *
 * <p>Connecting ({@link UcxConnector}) ends with UCX's wire-up over both ways ({@link UcxWireUp}): the client reads the
 * memserver's probe word over its new endpoint and flushes it before {@link #connect} returns, so no client of this
 * provider ever leaves while the memserver still owes its endpoint a wire-up reply (UCX 1.13 aborts the memserver's
 * process when such a client goes away). A close that comes before the wire-up is over lets it finish, within the
 * connect timeout, before the endpoint goes.
 *
 * <p>Remote keys come from MAP (the memserver checks the access key) and are cached per region
 * ({@link UcxRemoteKeys}); an INVALIDATE from the memserver (a release, a lease takeover) drops them, flushes what was
 * issued with them, and only then answers. A watchdog fails everything when any operation is older than the operation
 * timeout; a lost control connection or a UCX endpoint error fails everything at once.
 */
final class UcxConnection extends ControlPlaneConnection {
    private static final Logger log = LoggerFactory.getLogger(UcxConnection.class);

    /** The control connection: the socket, or TLS over it. */
    private final Link channel;
    private final String peer;
    private final long timeoutNanos;
    private final ConnectionStats stats = new ConnectionStats();
    private final UcxLoop loop;
    /** Where completions run, off the progress thread: the callers' callbacks never hold up the worker. */
    private final UcxCompletions completions;
    /** Held for the life of the connection: JUCX keeps only a weak reference for its error handler. */
    private UcpEndpoint endpoint;
    private final Object writeLock = new Object();
    /** Control requests and data operations not yet completed, by id: what the watchdog and a close fail. */
    private final ControlClient control;
    /** Reads the control connection; the reader thread's only. */
    private final MessageDecoder decoder = MessageDecoder.forClient();
    /** The regions' remote keys on this endpoint. */
    private final UcxRemoteKeys keys;
    /** The data operations on their way to UCX and back. */
    private final UcxOperationQueue ops;
    /** How the connect ended; whether a close must wait for the wire-up. */
    private final UcxWireUp wireUp;
    private final ScheduledFuture<?> watchdog;
    private final Thread reader;
    /** How long a close waits for the wire-up to be over: the connect timeout. */
    private final long lingerMillis;

    UcxConnection(Link channel, String peer, ConnectParams params, ServerInfo server, UcxLoop loop) {
        super(server, "memserver " + peer);
        this.channel = channel;
        this.peer = peer;
        this.timeoutNanos = params.operationTimeout().toNanos();
        this.lingerMillis = params.connectTimeout().toMillis();
        this.control = new ControlClient(peer);
        this.loop = loop;
        this.completions = new UcxCompletions("rdma-ucx-complete-" + peer, completeOnProgressThreadForBench);
        this.keys = new UcxRemoteKeys(loop, completions, () -> endpoint, d -> call(new ControlClient.Operation<>(
                id -> new Message.MapRegion(id, d.id(), d.key(), d.length()), r -> r)));
        this.ops = new UcxOperationQueue(peer, control, loop, completions, () -> endpoint, this::closedCause,
                this::closeWith);
        this.wireUp = new UcxWireUp(peer, timeoutNanos, control, loop, ops, () -> endpoint);
        long period = Math.max(10, Math.min(100, TimeUnit.NANOSECONDS.toMillis(timeoutNanos) / 4));
        this.watchdog = UcxListener.TIMER.scheduleWithFixedDelay(this::checkDeadlines, period, period,
                TimeUnit.MILLISECONDS);
        this.reader = new Thread(this::readLoop, "rdma-ucx-reader-" + peer);
        reader.setDaemon(true);
    }

    static UcxConnection connect(ConnectParams params) throws RemoteMemoryException {
        return UcxConnector.connect(params);
    }

    /** Makes the endpoint to the memserver's worker at {@code serverAddress}; on failure closes and says why. */
    void connectEndpoint(ByteBuffer serverAddress, long timeoutMillis) throws RemoteMemoryException {
        try {
            endpoint = loop.call(() -> loop.worker.newEndpoint(new UcpEndpointParams().setUcpAddress(serverAddress)
                    .setPeerErrorHandlingMode().setName("rbridge-" + peer)
                    .setErrorHandler((ep, status, message) -> closeWith(Ucx.failure("the UCX endpoint", peer,
                            status, message)))),
                    timeoutMillis);
        } catch (Exception e) {
            close();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "UCX could not connect to memserver " + peer
                    + ": " + e.getMessage(), e);
        }
    }

    /** Waits for the wire-up (see {@link UcxWireUp#await}), then starts reading; on failure closes and says why. */
    void finishConnect(Message.UcxProbeReply probe, long timeoutMillis) throws RemoteMemoryException {
        try {
            wireUp.await(probe, timeoutMillis);
        } catch (RemoteMemoryException e) {
            close();
            throw e;
        }
        reader.start();
    }

    // ------------------------------------------------------------------------------------------ control plane

    @Override
    public CompletableFuture<RegionDescriptor> allocate(RegionTag tag, long length) {
        return super.allocate(tag, length).thenCompose(this::mapped);
    }

    @Override
    public CompletableFuture<RegionDescriptor> open(long regionId) {
        return super.open(regionId).thenCompose(this::mapped);
    }

    /** The descriptor once its remote key is at hand (so the first data operation needs no round trip). */
    private CompletableFuture<RegionDescriptor> mapped(RegionDescriptor d) {
        return keys.mapping(d).handle((m, e) -> d); // a failed MAP fails the first data operation, not the grant
    }

    @Override
    @SuppressWarnings("unchecked")
    protected <T> CompletableFuture<T> call(ControlClient.Operation<T> op) {
        CompletableFuture<T> dead = failedIfClosed();
        if (dead != null) {
            return dead;
        }
        Message request = op.request().apply(control.nextId());
        ControlClient.Call c = new ControlClient.Call(request.id(), request.code(), System.nanoTime() + timeoutNanos,
                new CompletableFuture<>(), op.result());
        if (control.register(c)) {
            try {
                send(request);
            } catch (IOException e) {
                closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, "lost memserver " + peer
                        + " while sending: " + e.getMessage(), e));
            }
            Consumer<Message> seam = afterSendForTests;
            if (seam != null) {
                seam.accept(request);
            }
        }
        return (CompletableFuture<T>) (CompletableFuture<?>) c.future();
    }

    /**
     * Tests only: runs on the calling thread right after a control request is sent, before the caller does anything
     * with its reply, to hold that caller inside the window a fast reply races with.
     */
    static volatile Consumer<Message> afterSendForTests;

    /**
     * Benchmarks only (UcxHandOffBench): connections made from now on complete on the progress thread, as before
     * {@link UcxCompletions}, to measure what the hand-off costs.
     */
    static volatile boolean completeOnProgressThreadForBench;

    /** Tests: the progress spin budget of connections made from now on (negative: the environment's). */
    static volatile long spinBudgetNanosForTests = -1;

    private void send(Message m) throws IOException {
        ByteBuffer b = MessageEncoder.encode(m);
        synchronized (writeLock) {
            stats.sendMessages.increment();
            stats.sendBytes.add(b.remaining());
            while (b.hasRemaining()) {
                channel.write(b);
            }
        }
    }

    /** The reader thread: replies complete their calls; INVALIDATE drops remote keys. */
    private void readLoop() {
        MessageReader replies = new MessageReader(channel, decoder,
                ByteBuffer.allocate(64 << 10).order(ByteOrder.LITTLE_ENDIAN).flip());
        try {
            while (true) {
                Message m = replies.next();
                stats.recvMessages.increment();
                stats.recvBytes.add(Protocol.HEADER + (long) decoder.length());
                if (m instanceof Message.Invalidate i) {
                    invalidated(i);
                    continue;
                }
                // Checked before the call is taken: a reply that does not fit it closes the connection with the call
                // still waiting, so the close fails it (a data operation once UCX has let go of its buffer).
                ControlClient.Call c = control.waiting(m.id());
                if (c == null || c instanceof UcxDataOp) {
                    throw new MalformedMessageException((c == null ? "reply to unknown request "
                            : "a "
                                    + Opcode.name(m.code()) + " reply to data operation ")
                            + m.id());
                }
                if (decoder.payloadRemaining() > 0) {
                    throw new MalformedMessageException("READ data in reply to " + c.what());
                }
                if (control.remove(c)) { // else failed meanwhile: the connection is closing
                    control.answer(c, m);
                }
            }
        } catch (EOFException e) {
            closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, "memserver " + peer
                    + " closed the connection"));
        } catch (MalformedMessageException e) {
            closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, "memserver " + peer + " sent a malformed "
                    + "reply (" + e.getMessage() + "); connection closed"));
        } catch (IOException | RuntimeException e) {
            closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, "lost memserver " + peer + ": "
                    + e.getMessage(), e));
        }
    }

    /** The memserver withdraws regions: forget their keys, flush what used them, then answer. */
    private void invalidated(Message.Invalidate push) {
        keys.withdraw(push.regionIds(), gone -> {
            UcxDataOp barrier = new UcxDataOp(control.nextId(), Kind.FLUSH, System.nanoTime() + timeoutNanos, 0, null,
                    null, () -> {
                        loop.execute(() -> gone.forEach(m -> m.rkey.close()));
                        // Not from the progress thread: a control socket the memserver does not drain would block it.
                        Thread.ofVirtual().name("rdma-ucx-answer-" + peer).start(() -> {
                            try {
                                send(new Message.InvalidateDone(push.id()));
                            } catch (IOException e) {
                                log.debug("could not answer INVALIDATE: {}", e.getMessage());
                            }
                        });
                    });
            ops.submit(barrier);
        });
    }

    // -------------------------------------------------------------------------------------------- data plane

    @Override
    public CompletableFuture<Void> read(RegionDescriptor region, long offset, MemorySegment dst) {
        if (!dst.isAccessibleBy(loop.thread())) {
            return CompletableFuture.failedFuture(new IllegalArgumentException("a read buffer must be shared memory "
                    + "(Arena.ofShared, ofAuto or global): the provider's I/O thread fills it"));
        }
        stats.readOps.increment();
        stats.readBytes.add(dst.byteSize());
        if (dst.isNative()) {
            return data(Kind.GET, region, offset, dst, null);
        }
        MemorySegment staging = Arena.ofAuto().allocate(Math.max(1, dst.byteSize())).asSlice(0, dst.byteSize());
        return data(Kind.GET, region, offset, staging, () -> dst.copyFrom(staging));
    }

    @Override
    public CompletableFuture<Void> write(RegionDescriptor region, long offset, MemorySegment src) {
        stats.writeOps.increment();
        stats.writeBytes.add(src.byteSize());
        if (src.isNative()) {
            return data(Kind.PUT, region, offset, src, null);
        }
        MemorySegment staging = Arena.ofAuto().allocate(Math.max(1, src.byteSize())).asSlice(0, src.byteSize());
        staging.copyFrom(src);
        return data(Kind.PUT, region, offset, staging, null);
    }

    @Override
    public CompletableFuture<Void> zero(RegionDescriptor region, long offset, long length) {
        return ops.offQueue(call(ControlClient.zero(region, offset, length)));
    }

    @Override
    public CompletableFuture<Void> flush() {
        return ops.flush(new UcxDataOp(control.nextId(), Kind.FLUSH, System.nanoTime() + timeoutNanos, 0, null, null,
                null));
    }

    private CompletableFuture<Void> data(Kind kind, RegionDescriptor region, long offset, MemorySegment buffer,
            Runnable after) {
        CompletableFuture<Void> dead = failedIfClosed();
        if (dead != null) {
            return dead;
        }
        long size = buffer.byteSize();
        if (offset < 0 || size < 0 || offset > region.length() - size) {
            return CompletableFuture.failedFuture(new RemoteMemoryException(Status.OUT_OF_RANGE, "range " + offset
                    + "+" + size + " is outside region " + region.id() + " (" + region.length() + " bytes)"));
        }
        if (size == 0) {
            return CompletableFuture.completedFuture(null);
        }
        CompletableFuture<UcxMapping> m = keys.mapping(region);
        UcxMapping ready = UcxRemoteKeys.doneOrNull(m);
        if (ready != null) {
            CompletableFuture<Void> f = queue(kind, ready, region, offset, buffer, after);
            if (f != null) {
                return f;
            }
        }
        // Waiting for the remote key (or it was withdrawn just now): ask again once it is there.
        CompletableFuture<Void> f = m.thenCompose(x -> {
            CompletableFuture<Void> q = queue(kind, x, region, offset, buffer, after);
            return q != null ? q : data(kind, region, offset, buffer, after);
        });
        return ops.offQueue(f);
    }

    /** Queues the operation with {@code m}'s key, or null when the key was withdrawn meanwhile. */
    private CompletableFuture<Void> queue(Kind kind, UcxMapping m, RegionDescriptor region, long offset,
            MemorySegment buffer, Runnable after) {
        synchronized (m) {
            if (!m.valid) {
                return null;
            }
            if (offset > m.length - buffer.byteSize()) {
                return CompletableFuture.failedFuture(new RemoteMemoryException(Status.OUT_OF_RANGE, "range "
                        + offset + "+" + buffer.byteSize() + " is outside region " + region.id()));
            }
            return ops.submit(new UcxDataOp(control.nextId(), kind, System.nanoTime() + timeoutNanos,
                    m.address + offset, m.rkey, buffer, after));
        }
    }

    // -------------------------------------------------------------------------------------- failure and close

    private void checkDeadlines() {
        if (!isOpen()) {
            return;
        }
        ControlClient.Call late = control.overdue(System.nanoTime());
        if (late != null) {
            closeWith(control.timeout(late, timeoutNanos));
        } else if (!control.idle()) {
            loop.kick();
        }
    }

    UcpEndpoint endpointForTests() {
        return endpoint;
    }

    /** The progress thread's loop (tests: to stall it on purpose). */
    UcxLoop loop() {
        return loop;
    }

    @Override
    public ConnectionStats stats() {
        return stats;
    }

    @Override
    public String toString() {
        return "ucx connection to " + peer;
    }

    /**
     * Closed: the control connection closes, then (on the progress thread) the endpoint, forcibly, so UCX lets go of
     * every buffer, then everything pending fails and the worker stops. A backstop fails what is left a second later
     * should the progress thread be stuck.
     *
     * <p>While the wire-up is not over (a close during connect), the endpoint stays, and the worker keeps progressing,
     * until it is or for the connect timeout: the memserver may be about to send this endpoint its wire-up reply, and
     * UCX 1.13 aborts the memserver's process when the endpoint it sends to goes away with that reply still queued.
     */
    @Override
    protected void tearDown(RemoteMemoryException cause) {
        watchdog.cancel(false);
        Closeables.closeQuietly(channel.socket());
        loop.execute(() -> {
            if (endpoint != null && !wireUp.isOver()) {
                wireUp.over(lingerMillis).whenComplete((v, e) -> loop.execute(() -> closeEndpoint(cause)));
            } else {
                closeEndpoint(cause);
            }
        });
        UcxListener.TIMER.schedule(() -> backstop(cause), 1, TimeUnit.SECONDS);
    }

    /**
     * A second after a close, should the progress thread not have got to it (stuck in a completion, or lingering for
     * the wire-up): fails what UCX does not hold, the control calls and the data operations it was never given. The
     * posted ones wait for the endpoint's close or the worker's end, however long: failing them would hand their
     * buffers back (NBD's to its pool) while the NIC may still write into them.
     */
    private void backstop(RemoteMemoryException cause) {
        control.failAllBut(cause, c -> c instanceof UcxDataOp op && op.posted);
        ops.failQueued(cause);
        int held = control.waitingCount();
        if (held > 0 && !loop.stopped().isDone()) {
            log.warn("{}: {} data operation(s) still wait for UCX to let go of their buffers (the progress thread {} "
                    + "has not closed the endpoint yet); they fail when it does", cause.getMessage(), held,
                    loop.thread().getName());
        }
    }

    /** On the progress thread: the endpoint goes, forcibly; what is pending fails; the worker stops. */
    private void closeEndpoint(RemoteMemoryException cause) {
        UcpEndpoint ep = endpoint;
        if (ep != null) {
            try {
                UcpRequest r = ep.closeNonBlockingForce();
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
                while (r != null && !r.isCompleted() && System.nanoTime() < until) {
                    loop.worker.progress();
                }
            } catch (Exception e) {
                log.debug("closing the UCX endpoint to {} failed: {}", peer, e.toString());
            }
        }
        wireUp.closeProbeKey();
        keys.closeAll();
        // What UCX still holds fails once the worker is gone (its QPs with it): only then may the buffers go back.
        // Delivered on the completion thread, after the completions handed to it before: callbacks may block, and
        // the timer serves every connection. Then that thread ends.
        loop.stopped().whenComplete((v, e) -> completions.execute(() -> {
            failAll(cause);
            completions.close();
        }));
        loop.close();
    }

    private void failAll(RemoteMemoryException cause) {
        int failed = control.failAll(cause);
        ops.failQueued(cause);
        logClosed(log, cause, failed);
    }
}
