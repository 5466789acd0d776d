package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ServerInfo;
import dev.rbridge.rdma.wire.ControlClient;
import dev.rbridge.rdma.wire.ControlPlaneConnection;
import dev.rbridge.rdma.wire.MalformedMessageException;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageDecoder;
import dev.rbridge.rdma.wire.MessageEncoder;
import dev.rbridge.rdma.wire.MessageReader;
import dev.rbridge.rdma.wire.Opcode;
import dev.rbridge.rdma.wire.Protocol;
import org.openucx.jucx.UcxCallback;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpEndpointParams;
import org.openucx.jucx.ucp.UcpRemoteKey;
import org.openucx.jucx.ucp.UcpRequest;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import dev.rbridge.rdma.link.Link;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;

/**
 * The client end of a ucx-provider connection. Control operations go over a TCP connection (one reader thread matches
 * replies by id); READ and WRITE are UCX GET and PUT from the caller's memory straight to the region, on one UCX
 * worker whose progress thread alone touches it. Callers queue operations; the progress thread posts everything
 * queued, then one endpoint flush for the PUTs of that batch: a write completes when that flush does (remote
 * completion: the bytes are in the memserver's memory), so a burst of writes costs one flush, not one each.
 *
 * <p>Connecting ends with UCX's wire-up over both ways: the client reads the memserver's probe word over its new
 * endpoint and flushes it before {@link #connect} returns, so no client of this provider ever leaves while the
 * memserver still owes its endpoint a wire-up reply (UCX 1.13 aborts the memserver's process when such a client goes
 * away). A close that comes before the wire-up is over lets it finish, within the connect timeout, before the
 * endpoint goes.
 *
 * <p>Remote keys come from MAP (the memserver checks the access key) and are cached per region; an INVALIDATE
 * from the memserver (a release, a lease takeover) drops them, flushes what was issued
 * with them, and only then answers. A watchdog fails everything when any operation is older than the operation
 * timeout; a lost control connection or a UCX endpoint error fails everything at once.
 */
final class UcxConnection extends ControlPlaneConnection {
    private static final Logger log = LoggerFactory.getLogger(UcxConnection.class);
    /** The probe word as it is in the memserver's memory (see {@link Protocol#UCX_PROBE_WORD}). */
    private static final ValueLayout.OfLong PROBE_WORD = ValueLayout.JAVA_LONG.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** The control connection. */
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
    private final Map<MapKey, MapEntry> mappings = new ConcurrentHashMap<>();
    /** Operations issued but not yet on the queue (waiting for a remote key, zeroes): a flush waits for them. */
    private final Set<CompletableFuture<?>> offQueue = ConcurrentHashMap.newKeySet();
    private final ConcurrentLinkedQueue<Op> queue = new ConcurrentLinkedQueue<>();
    private final AtomicBoolean drainScheduled = new AtomicBoolean();
    private final AtomicReference<RemoteMemoryException> closed = new AtomicReference<>();
    private final ScheduledFuture<?> watchdog;
    private final Thread reader;
    /** The probe word's remote key while the probe may use it; the progress thread's only. */
    private UcpRemoteKey probeKey;
    /** Where the probe word lands; reachable while UCX may write it. */
    private final MemorySegment probeBuffer = Arena.ofAuto().allocate(8, 8);
    /**
     * Completed by UCX, success or failure, when the wire-up flush is over: until then the memserver may owe this
     * endpoint a wire-up reply, and the endpoint is not closed (see {@link #closeWith}).
     */
    private final CompletableFuture<Void> wiredUp = new CompletableFuture<>();
    /** How long a close waits for the wire-up to be over: the connect timeout. */
    private final long lingerMillis;

    private record MapKey(long region, long key, long length) {
    }

    /** A region's remote address and unpacked key on this endpoint. Ops are queued under its monitor. */
    private static final class Mapping {
        /** What a mapping whose key was withdrawn before it was unpacked completes with: never valid, no key. */
        static final Mapping REVOKED = new Mapping(0, 0, null);

        final long address;
        final long length;
        final UcpRemoteKey rkey;
        boolean valid;

        Mapping(long address, long length, UcpRemoteKey rkey) {
            this.address = address;
            this.length = length;
            this.rkey = rkey;
            this.valid = rkey != null;
        }
    }

    /**
     * A region's mapping while it is being made and once it is. {@code revoked} is set, before anything else is done
     * about it, when an INVALIDATE names the region: whichever comes last of that INVALIDATE's handling and the
     * unpacking of the MAP reply sees it, so a reply and an INVALIDATE that follow each other at once never leave a
     * valid-looking mapping with a withdrawn key, whatever thread ran the reply's continuation and when.
     */
    private static final class MapEntry {
        final CompletableFuture<Mapping> mapping = new CompletableFuture<>();
        volatile boolean revoked;
        /**
         * The mapping once its key is unpacked, before {@link #mapping} is completed with it (on the completion
         * thread, later): the progress thread's only, so an INVALIDATE handled in between still finds the key.
         */
        Mapping unpacked;
    }

    private enum Kind { GET, PUT, FLUSH }

    /** A data operation: completed by UCX, not by a reply, but watched and failed with the control calls. */
    private static final class Op extends ControlClient.Call {
        final Kind kind;
        final long remote;
        final UcpRemoteKey rkey;
        final long local;
        final long size;
        /** Kept reachable until completion: the caller's segment, or a native copy of a heap one. */
        final MemorySegment buffer;
        final Runnable after;
        /** Run on the progress thread when UCX is done with the operation, whether it or the connection failed. */
        Runnable settled;
        /**
         * Set by the progress thread just before it hands the operation to UCX: from then on only UCX's completion,
         * or the end of the worker, may fail it, since until then the NIC may still read or write its buffer.
         */
        volatile boolean posted;

        Op(long id, Kind kind, long deadline, long remote, UcpRemoteKey rkey, MemorySegment buffer, Runnable after) {
            super(id, (kind == Kind.GET ? Opcode.READ : kind == Kind.PUT ? Opcode.WRITE : Opcode.FLUSH).code(),
                    deadline, new CompletableFuture<>(), ControlClient.NOTHING);
            this.kind = kind;
            this.remote = remote;
            this.rkey = rkey;
            this.local = buffer == null ? 0 : buffer.address();
            this.size = buffer == null ? 0 : buffer.byteSize();
            this.buffer = buffer;
            this.after = after;
        }

        @Override
        public String what() {
            return kind.name();
        }
    }

    private UcxConnection(Link channel, String peer, ConnectParams params, ServerInfo server, UcxLoop loop) {
        super(server);
        this.channel = channel;
        this.peer = peer;
        this.timeoutNanos = params.operationTimeout().toNanos();
        this.lingerMillis = params.connectTimeout().toMillis();
        this.control = new ControlClient(peer);
        this.loop = loop;
        this.completions = new UcxCompletions("rdma-ucx-complete-" + peer, completeOnProgressThreadForBench);
        long period = Math.max(10, Math.min(100, TimeUnit.NANOSECONDS.toMillis(timeoutNanos) / 4));
        this.watchdog = UcxListener.TIMER.scheduleWithFixedDelay(this::checkDeadlines, period, period,
                TimeUnit.MILLISECONDS);
        this.reader = new Thread(this::readLoop, "rdma-ucx-reader-" + peer);
        reader.setDaemon(true);
    }

    static UcxConnection connect(ConnectParams params) throws RemoteMemoryException {
        String peer = params.address().getHostString() + ":" + params.address().getPort();
        UcpContext context = Ucx.context();
        SocketChannel ch;
        try {
            ch = SocketChannel.open();
        } catch (IOException e) {
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "cannot open a socket: " + e.getMessage(), e);
        }
        ScheduledFuture<?> guard = UcxListener.TIMER.schedule(() -> closeQuietly(ch),
                params.connectTimeout().toMillis(), TimeUnit.MILLISECONDS);
        UcxLoop loop = null;
        try {
            Ucx.tuneControlSocket(ch);
            ch.socket().connect(params.address(), (int) params.connectTimeout().toMillis());
            Link link = ControlClient.link(ch, params.tls(), params.address(), peer);
            ServerInfo info = ControlClient.greet(link, peer, params.token(), params.clientName());
            long spinForTests = spinBudgetNanosForTests;
            loop = new UcxLoop(context, "rdma-ucx-progress-" + peer, spinForTests >= 0 ? new ProgressSpin(spinForTests)
                    : ProgressSpin.fromEnvironment(System.getenv(),
                            Ucx.registrationPinsPages(System.getenv(), Ucx.rdmaDevices())));
            UcxLoop worker = loop;
            ByteBuffer serverAddress = ucxConnect(link, peer, loop.call(() -> worker.worker.getAddress(),
                    params.connectTimeout().toMillis()));
            Message.UcxProbeReply probe = ucxProbe(link, peer);
            if (!guard.cancel(false)) {
                throw new IOException("timed out");
            }
            UcxConnection c = new UcxConnection(link, peer, params, info, loop);
            UcxLoop l = loop;
            try {
                c.endpoint = l.call(() -> l.worker.newEndpoint(new UcpEndpointParams().setUcpAddress(serverAddress)
                        .setPeerErrorHandlingMode().setName("rbridge-" + peer)
                        .setErrorHandler((ep, status, message) -> c.closeWith(Ucx.failure("the UCX endpoint", peer,
                                status, message)))), params.connectTimeout().toMillis());
            } catch (Exception e) {
                c.close();
                throw new RemoteMemoryException(Status.CONNECT_FAILED, "UCX could not connect to memserver " + peer
                        + ": " + e.getMessage(), e);
            }
            c.wireUp(probe, params.connectTimeout().toMillis());
            c.reader.start();
            return c;
        } catch (IOException e) {
            boolean timedOut = !guard.cancel(false);
            closeQuietly(ch);
            if (loop != null) {
                loop.close();
            }
            String why = timedOut ? "no answer within " + params.connectTimeout().toMillis() + " ms"
                    : e.getMessage() == null ? e.toString() : e.getMessage();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "cannot reach memserver " + peer + ": " + why, e);
        } catch (RemoteMemoryException e) {
            guard.cancel(false);
            closeQuietly(ch);
            if (loop != null) {
                loop.close();
            }
            throw e;
        } catch (Exception e) {
            guard.cancel(false);
            closeQuietly(ch);
            if (loop != null) {
                loop.close();
            }
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "UCX could not connect to memserver " + peer + ": "
                    + e.getMessage(), e);
        }
    }

    /**
     * The memserver worker's UCX address, asked right after the greeting, before the reader thread runs, with this
     * connection's worker address, to which the memserver makes an endpoint of its own (see {@link UcxServerConnection}).
     */
    private static ByteBuffer ucxConnect(Link ch, String peer, ByteBuffer clientAddress)
            throws IOException, RemoteMemoryException {
        return switch (ControlClient.exchange(ch, peer, new Message.UcxConnect(0, clientAddress))) {
            case Message.UcxConnectReply r -> direct(r.workerAddress());
            case Message.Error e when e.message().contains("unexpected OP_") -> throw new RemoteMemoryException(
                    Status.CONNECT_FAILED, "memserver " + peer + " does not serve the ucx transport (it runs another "
                    + "one, tcp by default); start it with --transport ucx or connect with its transport");
            case Message.Error e -> throw new RemoteMemoryException(Status.of(e.status()), "memserver " + peer
                    + " refused the connection: " + e.message());
            case Message other -> throw new IOException(peer + " sent a malformed UCX_CONNECT reply ("
                    + ControlClient.describe(other) + ")");
        };
    }

    /**
     * Where the memserver's probe word is, asked right after UCX_CONNECT; null from a memserver that predates
     * UCX_PROBE (its wire-up is then awaited with the endpoint flush alone).
     */
    private static Message.UcxProbeReply ucxProbe(Link ch, String peer)
            throws IOException, RemoteMemoryException {
        return switch (ControlClient.exchange(ch, peer, new Message.UcxProbe(0))) {
            case Message.UcxProbeReply r -> r;
            case Message.Error e when e.message().contains("unexpected OP_" + Opcode.UCX_PROBE.code()) -> {
                log.debug("memserver {} predates UCX_PROBE: waiting for the UCX wire-up with a flush alone", peer);
                yield null;
            }
            case Message.Error e -> throw new RemoteMemoryException(Status.of(e.status()), "memserver " + peer
                    + " refused the connection: " + e.message());
            case Message other -> throw new IOException(peer + " sent a malformed UCX_PROBE reply ("
                    + ControlClient.describe(other) + ")");
        };
    }

    /**
     * Finishes connecting: reads the probe word over the new endpoint and flushes the endpoint, on the progress
     * thread, and waits for both. A read needs the memserver's endpoint ID, which comes with its wire-up reply, so UCX
     * holds it until that reply is in; the flush waits for every lane still in wire-up. Either failing, or taking
     * longer than the connect timeout (the operations themselves are bounded by the operation timeout), closes the
     * connection and fails the connect.
     */
    private void wireUp(Message.UcxProbeReply probe, long timeoutMillis) throws RemoteMemoryException {
        long deadline = System.nanoTime() + timeoutNanos;
        CompletableFuture<Void> read = new CompletableFuture<>();
        CompletableFuture<Void> flushed = new CompletableFuture<>();
        loop.execute(() -> {
            try {
                if (probe == null) {
                    read.complete(null);
                } else {
                    probeKey = endpoint.unpackRemoteKey(direct(probe.remoteKey()));
                    submit(new Op(control.nextId(), Kind.GET, deadline, probe.address(), probeKey, probeBuffer,
                            () -> loop.execute(this::closeProbeKey))).whenComplete((v, e) -> settle(read, e));
                }
                Op flush = new Op(control.nextId(), Kind.FLUSH, deadline, 0, null, null, null);
                flush.settled = () -> wiredUp.complete(null);
                submit(flush).whenComplete((v, e) -> settle(flushed, e));
            } catch (RuntimeException e) { // UCX would not take the probe's key: nothing of it was posted
                wiredUp.complete(null);
                read.completeExceptionally(e);
                flushed.completeExceptionally(e);
            }
        });
        try {
            CompletableFuture.allOf(read, flushed).get(timeoutMillis, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            close();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "UCX wire-up with memserver " + peer
                    + " did not complete within " + timeoutMillis + " ms");
        } catch (ExecutionException e) {
            close();
            Throwable why = e.getCause();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "UCX wire-up with memserver " + peer
                    + " failed: " + why.getMessage(), why);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            close();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "interrupted while UCX wired up with memserver "
                    + peer);
        }
        long word = probeBuffer.get(PROBE_WORD, 0);
        if (probe != null && word != Protocol.UCX_PROBE_WORD) {
            close();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "memserver " + peer + "'s probe word read over "
                    + "UCX as 0x" + Long.toHexString(word) + ", not 0x" + Long.toHexString(Protocol.UCX_PROBE_WORD)
                    + ": UCX does not reach the memory the memserver registered");
        }
    }

    private static void settle(CompletableFuture<Void> f, Throwable e) {
        if (e == null) {
            f.complete(null);
        } else {
            f.completeExceptionally(e);
        }
    }

    /** A copy in native memory: what JUCX wants for addresses and keys. */
    private static ByteBuffer direct(ByteBuffer b) {
        return ByteBuffer.allocateDirect(b.remaining()).put(b).flip();
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
        return mapping(d).handle((m, e) -> d); // a failed MAP fails the first data operation, not the grant
    }

    @Override
    @SuppressWarnings("unchecked")
    protected <T> CompletableFuture<T> call(ControlClient.Operation<T> op) {
        RemoteMemoryException dead = closed.get();
        if (dead != null) {
            return CompletableFuture.failedFuture(dead);
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
                if (c == null || c instanceof Op) {
                    throw new MalformedMessageException((c == null ? "reply to unknown request " : "a "
                            + Opcode.name(m.code()) + " reply to data operation ") + m.id());
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

    // ------------------------------------------------------------------------------------------ remote keys

    private CompletableFuture<Mapping> mapping(RegionDescriptor d) {
        MapKey k = new MapKey(d.id(), d.key(), d.length());
        MapEntry m = mappings.get(k);
        if (m != null) {
            return m.mapping;
        }
        MapEntry mine = new MapEntry();
        m = mappings.putIfAbsent(k, mine);
        if (m != null) {
            return m.mapping;
        }
        CompletableFuture<Message.MapReply> reply = call(new ControlClient.Operation<>(
                id -> new Message.MapRegion(id, d.id(), d.key(), d.length()), r -> r));
        // The continuation may run on the reader thread or, when the reply was quicker, on this one and later than
        // an INVALIDATE that followed the reply: the entry's revoked flag, not the order of threads, settles it.
        reply.whenComplete((r, e) -> {
            if (e != null) {
                mappings.remove(k, mine); // not cached: the next operation asks again
                mine.mapping.completeExceptionally(e);
                return;
            }
            loop.execute(() -> {
                if (mine.revoked) { // withdrawn already: never unpacked; whoever waits asks again
                    completions.execute(() -> mine.mapping.complete(Mapping.REVOKED));
                    return;
                }
                try {
                    Mapping made = new Mapping(r.address(), r.length(),
                            endpoint.unpackRemoteKey(direct(r.remoteKey())));
                    mine.unpacked = made;
                    completions.execute(() -> mine.mapping.complete(made));
                } catch (RuntimeException x) {
                    mappings.remove(k, mine);
                    completions.execute(() -> mine.mapping.completeExceptionally(new RemoteMemoryException(
                            Status.INTERNAL, "UCX could not unpack the remote key of region " + d.id() + ": "
                            + x.getMessage())));
                }
            });
        });
        return mine.mapping;
    }

    /** The mapping if it is there with a key, null while it is being made, when it failed or was revoked unmade. */
    private static Mapping doneOrNull(CompletableFuture<Mapping> f) {
        Mapping m = f.isDone() && !f.isCompletedExceptionally() ? f.join() : null;
        return m == null || m.rkey == null ? null : m;
    }

    /** The memserver withdraws regions: forget their keys, flush what used them, then answer. */
    private void invalidated(Message.Invalidate push) {
        Set<Long> regions = new HashSet<>(push.regionIds());
        List<MapEntry> dropped = new ArrayList<>();
        mappings.entrySet().removeIf(e -> {
            if (regions.contains(e.getKey().region())) {
                e.getValue().revoked = true; // before the task below is queued: see MapEntry
                dropped.add(e.getValue());
                return true;
            }
            return false;
        });
        loop.execute(() -> {
            List<Mapping> gone = new ArrayList<>();
            for (MapEntry f : dropped) {
                Mapping m = f.unpacked;
                if (m != null) {
                    synchronized (m) {
                        m.valid = false;
                    }
                    gone.add(m);
                }
            }
            Op barrier = new Op(control.nextId(), Kind.FLUSH, System.nanoTime() + timeoutNanos, 0, null, null,
                    () -> {
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
            submit(barrier);
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
        CompletableFuture<Void> f = call(ControlClient.zero(region, offset, length));
        offQueue.add(f);
        f.whenComplete((v, e) -> offQueue.remove(f));
        return f;
    }

    @Override
    public CompletableFuture<Void> flush() {
        CompletableFuture<?>[] before = offQueue.toArray(CompletableFuture[]::new);
        CompletableFuture<Void> epFlush = submit(new Op(control.nextId(), Kind.FLUSH,
                System.nanoTime() + timeoutNanos, 0, null, null, null));
        if (before.length == 0) {
            return epFlush;
        }
        return CompletableFuture.allOf(before).handle((v, e) -> null).thenCompose(v -> epFlush);
    }

    @SuppressWarnings("unchecked")
    private CompletableFuture<Void> data(Kind kind, RegionDescriptor region, long offset, MemorySegment buffer,
                                         Runnable after) {
        RemoteMemoryException dead = closed.get();
        if (dead != null) {
            return CompletableFuture.failedFuture(dead);
        }
        long size = buffer.byteSize();
        if (offset < 0 || size < 0 || offset > region.length() - size) {
            return CompletableFuture.failedFuture(new RemoteMemoryException(Status.OUT_OF_RANGE, "range " + offset
                    + "+" + size + " is outside region " + region.id() + " (" + region.length() + " bytes)"));
        }
        if (size == 0) {
            return CompletableFuture.completedFuture(null);
        }
        CompletableFuture<Mapping> m = mapping(region);
        Mapping ready = doneOrNull(m);
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
        offQueue.add(f);
        f.whenComplete((v, e) -> offQueue.remove(f));
        return f;
    }

    /** Queues the operation with {@code m}'s key, or null when the key was withdrawn meanwhile. */
    private CompletableFuture<Void> queue(Kind kind, Mapping m, RegionDescriptor region, long offset,
                                          MemorySegment buffer, Runnable after) {
        synchronized (m) {
            if (!m.valid) {
                return null;
            }
            if (offset > m.length - buffer.byteSize()) {
                return CompletableFuture.failedFuture(new RemoteMemoryException(Status.OUT_OF_RANGE, "range "
                        + offset + "+" + buffer.byteSize() + " is outside region " + region.id()));
            }
            return submit(new Op(control.nextId(), kind, System.nanoTime() + timeoutNanos, m.address + offset,
                    m.rkey, buffer, after));
        }
    }

    @SuppressWarnings("unchecked")
    private CompletableFuture<Void> submit(Op op) {
        if (control.register(op)) {
            enqueue(op);
        } else if (op.settled != null) {
            op.settled.run(); // closed: never posted
        }
        return (CompletableFuture<Void>) (CompletableFuture<?>) op.future();
    }

    private void enqueue(Op op) {
        queue.add(op);
        if (drainScheduled.compareAndSet(false, true)) {
            loop.execute(this::drain);
        }
    }

    /** On the progress thread: posts everything queued, then one flush covering the batch's PUTs. */
    private void drain() {
        drainScheduled.set(false);
        List<Op> puts = new ArrayList<>();
        Op op;
        while ((op = queue.poll()) != null) {
            op.posted = true; // before the check: a backstop that finds it unposted knows it never will be
            if (closed.get() != null) {
                unposted(op, closed.get());
                continue;
            }
            try {
                switch (op.kind) {
                    case GET -> {
                        endpoint.getNonBlocking(op.remote, op.rkey, op.local, op.size, callback(op, null));
                        loop.posted();
                    }
                    case PUT -> {
                        // Implicit: no request object or upcall per PUT; the batch's flush completes it, or fails
                        // the endpoint (and with it every operation) when any PUT of the batch failed.
                        endpoint.putNonBlockingImplicit(op.local, op.size, op.remote, op.rkey);
                        puts.add(op);
                    }
                    case FLUSH -> {
                        if (!puts.isEmpty()) {
                            flushPuts(puts);
                            puts = new ArrayList<>();
                        }
                        endpoint.flushNonBlocking(callback(op, null));
                        loop.posted();
                    }
                }
            } catch (RuntimeException e) {
                unposted(op, closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, "UCX refused a " + op.kind
                        + " to memserver " + peer + ": " + e.getMessage(), e)));
            }
        }
        if (!puts.isEmpty()) {
            flushPuts(puts);
        }
    }

    private void flushPuts(List<Op> puts) {
        try {
            endpoint.flushNonBlocking(callback(null, r -> completions.execute(() -> puts.forEach(this::complete))));
            loop.posted();
        } catch (RuntimeException e) {
            closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, "UCX refused a flush to memserver " + peer
                    + ": " + e.getMessage(), e));
        }
    }

    /**
     * Completes {@code op} on success (a PUT's own success is only local: its flush completes it), or everything on
     * an error: a failed GET, PUT or flush means the endpoint is broken.
     */
    private UcxCallback callback(Op op, Consumer<UcpRequest> onSuccess) {
        return new UcxCallback() {
            @Override
            public void onSuccess(UcpRequest request) {
                loop.settled();
                if (op != null && op.settled != null) {
                    op.settled.run();
                }
                if (onSuccess != null) {
                    onSuccess.accept(request);
                } else if (op.kind != Kind.PUT) {
                    completions.execute(() -> complete(op));
                }
            }

            @Override
            public void onError(int ucsStatus, String errorMsg) {
                loop.settled();
                if (op != null && op.settled != null) {
                    op.settled.run();
                }
                RemoteMemoryException e = closed.get() != null ? closed.get()
                        : Ucx.failure(op == null ? "a flush" : "a " + op.kind, peer, ucsStatus, errorMsg);
                if (op != null) {
                    fail(op, e);
                }
                closeWith(e);
            }
        };
    }

    private void complete(Op op) {
        if (control.remove(op)) {
            if (op.after != null) {
                try {
                    op.after.run();
                } catch (RuntimeException e) {
                    op.future().completeExceptionally(e);
                    return;
                }
            }
            op.future().complete(null);
        }
    }

    /** Fails {@code op}; on the completion thread when called on the progress thread. */
    private void fail(Op op, RemoteMemoryException e) {
        if (loop.inLoop()) {
            completions.execute(() -> fail(op, e));
        } else if (control.remove(op)) {
            op.future().completeExceptionally(e);
        }
    }

    /** Fails an operation UCX never saw: UCX is done with it too. */
    private void unposted(Op op, RemoteMemoryException e) {
        fail(op, e);
        if (op.settled != null) {
            op.settled.run();
        }
    }

    // -------------------------------------------------------------------------------------- failure and close

    private void checkDeadlines() {
        if (closed.get() != null) {
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
        return "ucx connection to " + peer;
    }

    /**
     * Closes once: the control connection, then (on the progress thread) the endpoint, forcibly, so UCX lets go of
     * every buffer, then fails everything pending and stops the worker. A backstop fails what is left a second later
     * should the progress thread be stuck. Returns the cause in force.
     *
     * <p>While the wire-up is not over (a close during connect), the endpoint stays, and the worker keeps progressing,
     * until it is or for the connect timeout: the memserver may be about to send this endpoint its wire-up reply, and
     * UCX 1.13 aborts the memserver's process when the endpoint it sends to goes away with that reply still queued.
     */
    private RemoteMemoryException closeWith(RemoteMemoryException cause) {
        if (!closed.compareAndSet(null, cause)) {
            return closed.get();
        }
        watchdog.cancel(false);
        closeQuietly(channel.socket());
        loop.execute(() -> {
            if (endpoint != null && !wiredUp.isDone()) {
                wiredUp.completeOnTimeout(null, lingerMillis, TimeUnit.MILLISECONDS)
                        .whenComplete((v, e) -> loop.execute(() -> closeEndpoint(cause)));
            } else {
                closeEndpoint(cause);
            }
        });
        UcxListener.TIMER.schedule(() -> backstop(cause), 1, TimeUnit.SECONDS);
        return cause;
    }

    /**
     * A second after a close, should the progress thread not have got to it (stuck in a completion, or lingering for
     * the wire-up): fails what UCX does not hold, the control calls and the data operations it was never given. The
     * posted ones wait for the endpoint's close or the worker's end, however long: failing them would hand their
     * buffers back (NBD's to its pool) while the NIC may still write into them.
     */
    private void backstop(RemoteMemoryException cause) {
        control.failAllBut(cause, c -> c instanceof Op op && op.posted);
        Op op;
        while ((op = queue.poll()) != null) {
            unposted(op, cause);
        }
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
        closeProbeKey();
        for (MapEntry f : mappings.values()) {
            Mapping m = f.unpacked;
            if (m != null) {
                try {
                    m.rkey.close();
                } catch (RuntimeException e) {
                    log.debug("rkey destroy failed", e);
                }
            }
        }
        mappings.clear();
        // What UCX still holds fails once the worker is gone (its QPs with it): only then may the buffers go back.
        // Delivered on the completion thread, after the completions handed to it before: callbacks may block, and
        // the timer serves every connection. Then that thread ends.
        loop.stopped().whenComplete((v, e) -> completions.execute(() -> {
            failAll(cause);
            completions.close();
        }));
        loop.close();
    }

    /** On the progress thread: the probe word's remote key, once the probe no longer needs it. */
    private void closeProbeKey() {
        UcpRemoteKey k = probeKey;
        probeKey = null;
        if (k != null) {
            try {
                k.close();
            } catch (RuntimeException e) {
                log.debug("rkey destroy failed", e);
            }
        }
    }

    private void failAll(RemoteMemoryException cause) {
        int failed = control.failAll(cause);
        Op op;
        while ((op = queue.poll()) != null) {
            unposted(op, cause);
        }
        if (cause.status() != Status.CONNECTION_LOST || failed > 0) {
            log.warn("{} ({} pending operation(s) failed)", cause.getMessage(), failed);
        } else {
            log.debug("{}", cause.getMessage());
        }
    }

    private static void closeQuietly(SocketChannel ch) {
        try {
            ch.close();
        } catch (IOException e) {
            log.debug("close failed", e);
        }
    }
}
