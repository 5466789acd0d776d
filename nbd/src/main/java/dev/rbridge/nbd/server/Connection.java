package dev.rbridge.nbd.server;

import dev.rbridge.common.Printable;
import dev.rbridge.common.splice.Pipe;
import dev.rbridge.nbd.device.BlockDevice;
import dev.rbridge.nbd.device.BlockDeviceException;
import dev.rbridge.nbd.device.Extent;
import dev.rbridge.nbd.protocol.ClientFlags;
import dev.rbridge.nbd.protocol.Errno;
import dev.rbridge.nbd.protocol.HandshakeDecoder;
import dev.rbridge.nbd.protocol.HandshakeEncoder;
import dev.rbridge.nbd.protocol.HandshakeMessage;
import dev.rbridge.nbd.protocol.Nbd;
import dev.rbridge.nbd.protocol.NbdProtocolException;
import dev.rbridge.nbd.protocol.OptionRequest;
import dev.rbridge.nbd.protocol.ReplyEncoder;
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
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One client connection, run by one platform thread: the handshake (blocking), then the transmission loop on a
 * non-blocking socket with a selector of its own. The thread reads and decodes requests and hands them to the
 * device; replies go out through the {@link Outbox} from whichever thread completes them, and never make that thread
 * wait: what the client does not read stays queued until this thread can write it. A protocol violation ends this
 * connection only.
 *
 * <p>What one connection can hold is bounded: requests at the device ({@code maxInFlightPerConnection}), payload
 * bytes (its {@link PayloadBudget.Account}), and time (the {@link NbdServer}'s housekeeper closes it when a handshake,
 * a half-received request or an unread reply overstays). When a bound is reached the connection stops reading, so
 * TCP pushes back on the client, and a request that is decoded but cannot start yet waits for room; it is never
 * refused for it.
 */
final class Connection implements Runnable {
    private static final Logger log = LoggerFactory.getLogger(Connection.class);
    /** How much of a name a peer sent a log line shows. */
    private static final int LOGGED_NAME_BYTES = 128;
    /** Small enough that little of a large WRITE payload is copied through it (the rest goes straight to its buffer). */
    private static final int READ_BUFFER = 64 << 10;

    /** During the handshake: options are streamed through the decoder, so this needs only hold what one read brings. */
    private static final int HANDSHAKE_BUFFER = 4 << 10;
    private static final int MAX_OPTIONS = 4096;
    private static final int BASE_ALLOCATION_ID = 1;
    /** Extents per BLOCK_STATUS reply; the spec lets a server stop early, and clients ask again from there. */
    private static final int MAX_EXTENTS = 4096;
    static final int HANDSHAKE_FLAGS = Nbd.FLAG_FIXED_NEWSTYLE | Nbd.FLAG_NO_ZEROES;

    private final NbdServer server;
    private final SocketChannel channel;
    /** The socket, or TLS over it once the client asked for it (STARTTLS). */
    private Wire wire;
    private volatile SecureWire tls;
    /**
     * The pipes of spliced READs, from transmission on when the connection is plain and its device splices; else null
     * and READ data is copied.
     */
    private volatile ReadPipes readPipes;
    private final long id;
    private final String peer;
    private final String peerAddress;
    private final long acceptedNanos;
    private ByteBuffer in = ByteBuffer.allocate(HANDSHAKE_BUFFER).flip();
    private final NbdServerMetrics metrics;
    private NbdServerMetrics.ExportMetrics exportMetrics = NbdServerMetrics.ExportMetrics.NONE;

    // negotiated during the handshake
    private ClientFlags clientFlags = new ClientFlags(0);
    private boolean structured;
    private Export metaContextExport;
    private boolean baseAllocation;

    // transmission
    private volatile boolean inTransmission;
    private Export export;
    private BlockDevice device;
    // set once when transmission starts; read by completing threads, the housekeeper and closers
    private volatile Outbox outbox;
    private volatile Selector selector;
    private SelectionKey key;
    private volatile PayloadBudget.Account budget;
    private RequestDecoder decoder;
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
    private volatile boolean draining;
    /** Why the server closed this connection, if it did (the housekeeper's reason), else null. */
    private final java.util.concurrent.atomic.AtomicReference<String> closedBecause =
            new java.util.concurrent.atomic.AtomicReference<>();
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

    Connection(NbdServer server, SocketChannel channel, long id, String peer, String peerAddress) {
        this.server = server;
        this.channel = channel;
        this.wire = Wire.of(channel);
        this.id = id;
        this.peer = peer;
        this.peerAddress = peerAddress;
        this.metrics = server.config().metrics();
        this.acceptedNanos = System.nanoTime();
        this.lastActiveNanos = acceptedNanos;
    }

    long id() {
        return id;
    }

    String peer() {
        return peer;
    }

    /** The peer's address without the port: what the per-peer limits count by. */
    String peerAddress() {
        return peerAddress;
    }

    boolean inTransmission() {
        return inTransmission;
    }

    long acceptedNanos() {
        return acceptedNanos;
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

    /** Payload bytes this connection holds now (buffers being received, at the device, or waiting to be sent). */
    long heldBytes() {
        PayloadBudget.Account b = budget;
        return b == null ? 0 : b.held();
    }

    /**
     * Nothing in flight, nothing half-received, no memory held, nothing waiting to be written: giving up this
     * connection loses no work. (A request that waits for memory but holds none does not count: so that connections
     * waiting for memory cannot hold every slot.)
     */
    boolean idle() {
        Outbox o = outbox;
        return inFlight.get() == 0 && partialSinceNanos == 0 && heldBytes() == 0 && (o == null || o.idle());
    }

    /** The server already decided to close this connection. */
    boolean closing() {
        return closedBecause.get() != null;
    }

    @Override
    public void run() {
        String ending = "closed by client";
        try {
            if (handshake()) {
                transmission();
            }
        } catch (EOFException e) {
            ending = inTransmission ? "client closed the connection" : "client closed the connection during the handshake";
        } catch (NbdProtocolException e) {
            ending = "protocol violation: " + e.getMessage();
            metrics.protocolViolation();
            server.logLimited("protocol", "connection {} from {}: {}; closing this connection only", id, peer, ending);
        } catch (ClosedChannelException e) {
            ending = closing() ? closedBecause.get() : server.closing() ? "server shutdown" : "connection closed";
        } catch (IOException e) {
            ending = closing() ? closedBecause.get() : "I/O error: " + e.getMessage();
        } catch (RuntimeException | OutOfMemoryError e) {
            ending = "internal error: " + e;
            log.error("connection {} from {}: internal error", id, peer, e);
        } finally {
            finish(ending);
        }
    }

    // ------------------------------------------------------------------------------------------------ handshake

    /** Returns true when the client entered transmission, false when it left cleanly during option haggling. */
    private boolean handshake() throws IOException, NbdProtocolException {
        writeFully(HandshakeEncoder.greeting(HANDSHAKE_FLAGS));
        HandshakeDecoder decoder = new HandshakeDecoder(HANDSHAKE_FLAGS);
        int options = 0;
        while (true) {
            HandshakeMessage message = decoder.next(in);
            if (message == null) {
                readMore();
                continue;
            }
            if (message instanceof ClientFlags flags) {
                clientFlags = flags;
                continue;
            }
            if (++options > MAX_OPTIONS) {
                throw new NbdProtocolException("more than " + MAX_OPTIONS + " options without entering transmission");
            }
            OptionRequest option = (OptionRequest) message;
            if (server.closing() && !(option instanceof OptionRequest.Abort)) {
                reply(option, Nbd.REP_ERR_SHUTDOWN, "server is shutting down");
                continue;
            }
            if (tls == null && server.config().tls().required()
                    && !(option instanceof OptionRequest.StartTls || option instanceof OptionRequest.Abort)) {
                if (option instanceof OptionRequest.ExportName) {
                    // EXPORT_NAME has no error reply: the spec's only answer is to close.
                    server.logLimited("export_name_in_clear", "connection {} from {}: asked for an export in clear "
                            + "(EXPORT_NAME) where TLS is required; closing", id, peer);
                    return false;
                }
                metrics.tlsRefused("tls_required");
                reply(option, Nbd.REP_ERR_TLS_REQD, "this server requires TLS: negotiate NBD_OPT_STARTTLS first "
                        + "(an nbds:// URI)");
                continue;
            }
            switch (option) {
                case OptionRequest.ExportName o -> {
                    Export e = server.config().export(o.name());
                    if (e == null) {
                        // EXPORT_NAME has no error reply: the spec's only answer is to close.
                        // The name is the peer's: shown printable and short, and at most a line every few seconds.
                        server.logLimited("unknown_export", "connection {} from {}: asked for unknown export '{}' "
                                + "with EXPORT_NAME; closing", id, peer, Printable.cut(o.name(), LOGGED_NAME_BYTES));
                        return false;
                    }
                    int flags = transmissionFlags(e);
                    if (!enterTransmission(e)) { // before the client hears it (see info)
                        throw noSlot(); // EXPORT_NAME has no error reply: the answer is to close
                    }
                    writeFully(HandshakeEncoder.exportNameReply(e.size(), flags, clientFlags.noZeroes()));
                    return true;
                }
                case OptionRequest.Abort o -> {
                    writeFully(HandshakeEncoder.ack(o.option()));
                    return false;
                }
                case OptionRequest.ListExports o -> {
                    for (Export e : server.config().exports()) {
                        writeFully(HandshakeEncoder.reply(o.option(), Nbd.REP_SERVER,
                                HandshakeEncoder.server(e.name(), e.description())));
                    }
                    writeFully(HandshakeEncoder.ack(o.option()));
                }
                case OptionRequest.StartTls o -> startTls(o);
                case OptionRequest.ExtendedHeaders o ->
                        reply(o, Nbd.REP_ERR_UNSUP, "extended headers are not supported by this server");
                case OptionRequest.StructuredReply o -> {
                    structured = true;
                    writeFully(HandshakeEncoder.ack(o.option()));
                }
                case OptionRequest.Info o -> {
                    if (info(o)) {
                        return true;
                    }
                }
                case OptionRequest.MetaContext o -> metaContext(o);
                case OptionRequest.Unknown o ->
                        reply(o, Nbd.REP_ERR_UNSUP, "option " + Nbd.optionName(o.option()) + " is not supported");
                case OptionRequest.Malformed o -> reply(o, Nbd.REP_ERR_INVALID, o.reason());
                case OptionRequest.TooBig o -> reply(o, Nbd.REP_ERR_TOO_BIG,
                        "option data of " + o.length() + " bytes is more than this server accepts");
            }
        }
    }

    /**
     * NBD_OPT_STARTTLS: acknowledged in clear, then the TLS handshake on the same socket, and the option haggling
     * goes on inside TLS from scratch (what was negotiated before counts for nothing, as the protocol says).
     */
    private void startTls(OptionRequest.StartTls o) throws IOException, NbdProtocolException {
        if (!server.config().tls().enabled()) {
            reply(o, Nbd.REP_ERR_UNSUP, "TLS is not enabled on this server (start it with --tls on or --tls "
                    + "require, and --tls-certificates DIR)");
            return;
        }
        if (tls != null) {
            reply(o, Nbd.REP_ERR_INVALID, "TLS is already on");
            return;
        }
        if (in.hasRemaining()) {
            // Bytes sent after STARTTLS, before our answer, would be taken as if they came inside TLS: an attacker
            // in the path could inject options that way (the STARTTLS injection class of bugs). Refuse them.
            throw new NbdProtocolException(in.remaining() + " byte(s) sent after NBD_OPT_STARTTLS before the "
                    + "server's reply");
        }
        writeFully(HandshakeEncoder.ack(o.option()));
        dev.rbridge.nbd.tls.NbdTls settings = server.config().tls();
        try {
            tls = settings.usesPsk() ? PskTlsWire.handshake(channel, settings.newPskServer())
                    : TlsWire.handshake(channel, settings.newEngine());
        } catch (javax.net.ssl.SSLException | org.bouncycastle.tls.TlsFatalAlert
                 | org.bouncycastle.tls.TlsFatalAlertReceived e) {
            metrics.tlsRefused("handshake_failed");
            throw new NbdProtocolException("TLS handshake failed: " + e.getMessage());
        }
        wire = tls;
        structured = false;
        metaContextExport = null;
        baseAllocation = false;
        log.info("connection {} from {}: TLS established ({})", id, peer, tls.describe());
    }

    private boolean info(OptionRequest.Info o) throws IOException {
        Export e = server.config().export(o.name());
        if (e == null) {
            reply(o, Nbd.REP_ERR_UNKNOWN, "no export named '" + o.name() + "'; exports: " + exportNames());
            return false;
        }
        int flags = transmissionFlags(e);
        writeFully(HandshakeEncoder.reply(o.option(), Nbd.REP_INFO, HandshakeEncoder.infoExport(e.size(), flags)));
        if (o.requests().contains(Nbd.INFO_NAME)) {
            writeFully(HandshakeEncoder.reply(o.option(), Nbd.REP_INFO, HandshakeEncoder.infoName(e.name())));
        }
        if (o.requests().contains(Nbd.INFO_DESCRIPTION) && !e.description().isEmpty()) {
            writeFully(HandshakeEncoder.reply(o.option(), Nbd.REP_INFO,
                    HandshakeEncoder.infoDescription(e.description())));
        }
        // Always sent: clients that did not ask still learn the limits they must respect.
        writeFully(HandshakeEncoder.reply(o.option(), Nbd.REP_INFO, HandshakeEncoder.infoBlockSize(
                e.minimumBlockSize(), e.preferredBlockSize(), e.maximumPayload())));
        if (o.go()) {
            // In transmission before the client can know it: a client that hears the ACK and opens its next
            // connection must find this one counted as serving, not as a handshake to evict first.
            if (!enterTransmission(e)) {
                reply(o, Nbd.REP_ERR_POLICY, "no connection slot is free on this server now; try again later");
                throw noSlot();
            }
            writeFully(HandshakeEncoder.ack(o.option()));
            return true;
        }
        writeFully(HandshakeEncoder.ack(o.option()));
        return false;
    }

    private void metaContext(OptionRequest.MetaContext o) throws IOException {
        if (!structured) {
            reply(o, Nbd.REP_ERR_INVALID, "negotiate structured replies before metadata contexts");
            return;
        }
        Export e = server.config().export(o.exportName());
        if (e == null) {
            reply(o, Nbd.REP_ERR_UNKNOWN, "no export named '" + o.exportName() + "'; exports: " + exportNames());
            return;
        }
        boolean base = o.queries().isEmpty() && !o.set();
        for (String q : o.queries()) {
            if (q.indexOf(':') < 0) {
                reply(o, Nbd.REP_ERR_INVALID, "query '" + q + "' does not start with a namespace ('base:')");
                return;
            }
            base |= q.equals("base:") || q.equals(Nbd.CONTEXT_BASE_ALLOCATION);
        }
        if (o.set()) {
            baseAllocation = base;
            metaContextExport = e;
        }
        if (base) {
            writeFully(HandshakeEncoder.reply(o.option(), Nbd.REP_META_CONTEXT,
                    HandshakeEncoder.metaContext(o.set() ? BASE_ALLOCATION_ID : 0, Nbd.CONTEXT_BASE_ALLOCATION)));
        }
        writeFully(HandshakeEncoder.ack(o.option()));
    }

    private void reply(OptionRequest o, int errorType, String message) throws IOException {
        writeFully(HandshakeEncoder.error(o.option(), errorType, message));
    }

    private String exportNames() {
        return String.join(", ", server.config().exports().stream().map(x -> "'" + x.name() + "'").toList());
    }

    private int transmissionFlags(Export e) {
        int f = Nbd.FLAG_HAS_FLAGS | Nbd.FLAG_SEND_FLUSH | Nbd.FLAG_SEND_FUA | Nbd.FLAG_SEND_CACHE;
        if (e.readOnly()) {
            f |= Nbd.FLAG_READ_ONLY;
        } else {
            f |= Nbd.FLAG_SEND_TRIM | Nbd.FLAG_SEND_WRITE_ZEROES;
            if (e.device().fastZero()) {
                f |= Nbd.FLAG_SEND_FAST_ZERO;
            }
        }
        if (structured) {
            f |= Nbd.FLAG_SEND_DF;
        }
        if (e.device().multiConnSafe()) {
            f |= Nbd.FLAG_CAN_MULTI_CONN;
        }
        return f;
    }

    /** What ends a connection the server had no slot for at the end of its handshake. */
    private ClosedChannelException noSlot() {
        decideToClose("no slot at the end of its handshake (the connection limits)");
        return new ClosedChannelException();
    }

    /**
     * Enters transmission with {@code e}; false, and nothing changed, when the server has no slot for a connection let
     * in over its limits after all ({@link NbdServer#enterTransmission}): the client must be let go.
     */
    private boolean enterTransmission(Export e) {
        if (!server.enterTransmission(this)) {
            return false;
        }
        export = e;
        device = e.device();
        if (metaContextExport != e) {
            baseAllocation = false; // contexts negotiated for another export do not carry over
        }
        inTransmission = true;
        lastActiveNanos = System.nanoTime();
        exportMetrics = metrics.export(e.name());
        exportMetrics.connectionOpened();
        log.info("connection {} from {}: serving export '{}' ({} bytes{}{})", id, peer, e.name(), e.size(),
                e.readOnly() ? ", read-only" : "", structured ? ", structured replies" : "");
        return true;
    }

    // --------------------------------------------------------------------------------------------- transmission

    private void transmission() throws IOException, NbdProtocolException {
        ByteBuffer leftover = in;
        in = ByteBuffer.allocateDirect(READ_BUFFER).put(leftover).flip();
        maxInFlight = server.config().maxInFlightPerConnection();
        selector = Selector.open();
        channel.configureBlocking(false);
        key = channel.register(selector, 0);
        Thread self = Thread.currentThread();
        budget = server.payloadBudget().open(peerAddress, selector::wakeup);
        readPipes = tls == null && device.splicesReads() && Pipe.unavailable() == null
                ? new ReadPipes(id, channel, device, budget) : null;
        ReadPipes pipes = readPipes;
        outbox = new Outbox(wire, pipes == null ? () -> null : pipes::descriptor, this::replied, this::closeChannel, () -> {
            if (Thread.currentThread() != self) {
                selector.wakeup(); // this thread must now wait for the socket to be writable
            }
        });
        decoder = new RequestDecoder(this::allocatePayload, export.maximumPayload());
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

    /** True when {@code r} needs buffer memory to start (a READ, for its data). */
    private boolean needsBuffer(Request r) {
        return r.type() == Nbd.CMD_READ && r.length() > 0;
    }

    /** Keeps {@link #partialSinceNanos}: only time the client owes us bytes counts, not time we wait for buffers. */
    private void trackPartial() {
        if (decoder.atBoundary() || decoder.awaitingBuffer()) {
            partialSinceNanos = 0;
        } else if (partialSinceNanos == 0) {
            partialSinceNanos = System.nanoTime();
        }
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

    /** Gives a payload buffer back to the pool and its bytes back to the budget. */
    private void releasePayload(ByteBuffer b) {
        if (b == null || !b.isDirect()) {
            return; // none, or the empty payload of a zero-length WRITE
        }
        budget.release(server.bufferPool().capacityFor(b.capacity()));
        server.bufferPool().release(b);
    }

    /** Starts {@code r}, or returns false when it must wait for a slot or buffer memory. */
    private boolean tryStart(Request r) {
        long start = System.nanoTime();
        if (draining) {
            requests++;
            exportMetrics.requestStarted(r.type());
            if (structured) {
                fail(r, start, Errno.ESHUTDOWN, "server is shutting down");
            } else {
                // Simple replies mean the Linux kernel (it uses nothing else), which turns any error reply into EIO
                // for the filesystem. Left unanswered, the request is requeued by the kernel once the connection
                // closes and its timeout passes, onto a reconnected socket (rbridge attach, nbd-client -persist): a
                // bridge restart then costs a pause, not an I/O error. The spec's ESHUTDOWN is a MAY-speed-up.
                releasePayload(r.payload());
                exportMetrics.requestCompleted(r.type(), 0, System.nanoTime() - start, Errno.ESHUTDOWN);
                log.debug("connection {}: {} left unanswered: shutting down", id, r);
            }
            return true;
        }
        if (inFlight.get() >= maxInFlight) {
            waitingForSlot = true;
            return false;
        }
        Rejection rejection = validate(r);
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
        if (rejection != null) {
            fail(r, start, rejection.errno(), rejection.reason());
            return true;
        }
        inFlight.incrementAndGet();
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
            return true; // these reply from their own completion handlers
        }
        op.whenComplete((v, t) -> {
            releasePayload(r.payload());
            if (t == null) {
                complete(r, start, null, new Reply.Simple(r.handle(), 0, null));
            } else {
                failed(r, start, t);
            }
        });
        return true;
    }

    private CompletableFuture<?> read(Request r, long start, ByteBuffer buffer) {
        int length = (int) r.length();
        if (length == 0) {
            complete(r, start, null, structured ? new Reply.Done(r.handle()) : new Reply.Simple(r.handle(), 0, null));
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
                releasePayload(buffer);
                failed(r, start, t);
                return;
            }
            buffer.position(0).limit(length);
            complete(r, start, null, structured ? new Reply.ReadData(r.handle(), r.offset(), buffer)
                    : new Reply.Simple(r.handle(), 0, buffer));
        });
        return f;
    }

    private CompletableFuture<?> readSpliced(Request r, long start, ByteBuffer buffer, Pipe pipe) {
        int length = (int) r.length();
        CompletableFuture<Integer> f;
        try {
            f = device.readSpliced(r.offset(), buffer, pipe);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete((piped, failure) -> {
            try {
                Throwable t = failure;
                if (t == null && (piped == null || piped < 0 || piped > length
                        || (piped > 0 && piped != pipe.held()))) {
                    t = new IllegalStateException("the device reported " + piped + " bytes spliced of " + length
                            + " where the pipe holds " + pipe.held());
                }
                if (t != null) {
                    readPipes.discard(pipe, length);
                    releasePayload(buffer);
                    failed(r, start, t);
                } else if (piped == 0) { // read into memory after all (a failed spliced attempt may have left bytes)
                    readPipes.discard(pipe, length);
                    buffer.position(0).limit(length);
                    complete(r, start, null, structured ? new Reply.ReadData(r.handle(), r.offset(), buffer)
                            : new Reply.Simple(r.handle(), 0, buffer));
                } else {
                    buffer.position(piped).limit(length);
                    complete(r, start, null, new Reply.PipedRead(r.handle(), r.offset(), structured, pipe, buffer,
                            length));
                }
            } catch (RuntimeException e) {
                log.error("connection {}: completing a spliced READ failed", id, e);
                failed(r, start, e);
            }
        });
        return f;
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
            complete(r, start, null, new Reply.BlockStatus(r.handle(), BASE_ALLOCATION_ID, lengths, states, n));
        });
        return f;
    }

    /** Why a request is refused before it reaches the device. */
    private record Rejection(Errno errno, String reason) {
    }

    /** Null when the request may go to the device. */
    private Rejection validate(Request r) {
        int type = r.type();
        int allowed = switch (type) {
            case Nbd.CMD_READ -> Nbd.CMD_FLAG_FUA | (structured ? Nbd.CMD_FLAG_DF : 0);
            case Nbd.CMD_WRITE, Nbd.CMD_FLUSH, Nbd.CMD_TRIM, Nbd.CMD_CACHE -> Nbd.CMD_FLAG_FUA;
            case Nbd.CMD_WRITE_ZEROES -> Nbd.CMD_FLAG_FUA | Nbd.CMD_FLAG_NO_HOLE
                    | (device.fastZero() ? Nbd.CMD_FLAG_FAST_ZERO : 0);
            case Nbd.CMD_BLOCK_STATUS -> Nbd.CMD_FLAG_FUA | Nbd.CMD_FLAG_REQ_ONE;
            default -> -1;
        };
        if (allowed < 0) {
            return new Rejection(Errno.EINVAL, "unknown command " + type);
        }
        if ((r.flags() & ~allowed) != 0) {
            return new Rejection(Errno.EINVAL, "flags 0x" + Integer.toHexString(r.flags() & ~allowed)
                    + " are not valid on " + Nbd.commandName(type));
        }
        boolean writes = type == Nbd.CMD_WRITE || type == Nbd.CMD_TRIM || type == Nbd.CMD_WRITE_ZEROES;
        if (writes && export.readOnly()) {
            return new Rejection(Errno.EPERM, "export '" + export.name() + "' is read-only");
        }
        if (type == Nbd.CMD_FLUSH) {
            return r.offset() != 0 || r.length() != 0
                    ? new Rejection(Errno.EINVAL, "FLUSH must have offset and length zero") : null;
        }
        if ((type == Nbd.CMD_READ || type == Nbd.CMD_WRITE)
                && (r.payloadDiscarded() || r.length() > export.maximumPayload())) {
            // The payload (if any) was skipped, so the stream stays framed and the session goes on.
            return new Rejection(Errno.EOVERFLOW, "length " + r.length() + " exceeds the maximum payload of "
                    + export.maximumPayload());
        }
        // The export's size now, not at the handshake: a volume only grows while served, and a client told of the
        // growth some other way uses its open connections for the new range (the kernel's nbd device after attach
        // resized it through netlink).
        long size = export.size();
        if (r.offset() < 0 || r.offset() > size || r.length() > size - r.offset()) {
            return new Rejection(writes ? Errno.ENOSPC : Errno.EINVAL, "range " + Long.toUnsignedString(r.offset())
                    + "+" + r.length() + " is beyond the end of the export (" + size + " bytes)");
        }
        int min = export.minimumBlockSize();
        if (min > 1 && ((r.offset() | r.length()) & (min - 1)) != 0) {
            return new Rejection(Errno.EINVAL, "offset and length must be multiples of the minimum block size " + min);
        }
        if (type == Nbd.CMD_BLOCK_STATUS) {
            if (!baseAllocation) {
                return new Rejection(Errno.EINVAL, "BLOCK_STATUS needs the base:allocation context negotiated");
            }
            if (r.length() == 0) {
                return new Rejection(Errno.EINVAL, "BLOCK_STATUS needs a non-zero length");
            }
        }
        return null;
    }

    // ------------------------------------------------------------------------------------------------- replies

    /** Replies with an error to a request that never reached the device. */
    private void fail(Request r, long start, Errno errno, String message) {
        releasePayload(r.payload());
        log.debug("connection {}: {} -> {} ({})", id, r, errno, message);
        inFlight.incrementAndGet();
        complete(r, start, errno, errorReply(r, errno, message));
    }

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
            server.logLimited("device_error", "connection {}: {} failed on export '{}'", id, r, export.name(),
                    cause);
        }
        complete(r, start, errno, errorReply(r, errno, message));
    }

    private Reply errorReply(Request r, Errno errno, String message) {
        return structured ? new Reply.Error(r.handle(), errno.code(), ReplyEncoder.message(message))
                : new Reply.Simple(r.handle(), errno.code(), null);
    }

    private void complete(Request r, long start, Errno errno, Reply reply) {
        long bytes = r.type() == Nbd.CMD_READ || r.type() == Nbd.CMD_WRITE ? r.length() : 0;
        long nanos = System.nanoTime() - start;
        exportMetrics.requestCompleted(r.type(), bytes, nanos, errno);
        lastActiveNanos = start + nanos;
        outbox.send(reply);
    }

    // ----------------------------------------------------------------------------------------------- lifecycle

    /**
     * Stops taking new requests so in-flight ones can finish: with structured replies they get ESHUTDOWN; with simple
     * replies (the kernel) they get no answer, and the client retries them after the connection closes.
     */
    void beginDrain() {
        draining = true;
        Selector s = selector;
        if (s != null) {
            s.wakeup(); // a request waiting for room is now answered at once
        }
    }

    /** True when nothing is in flight and every reply has been written. */
    boolean quiescent() {
        return !inTransmission || (inFlight.get() == 0 && (outbox == null || outbox.idle()));
    }

    /**
     * The server decides to close this connection (a limit or a timeout); {@code reason} is how its end is logged.
     * False when it was already decided for another reason (only the first counts). The caller counts and logs the
     * closing, then calls {@link #closeChannel}: so whoever sees the connection end also sees it counted.
     */
    boolean decideToClose(String reason) {
        return closedBecause.compareAndSet(null, reason);
    }

    void closeChannel() {
        SecureWire t = tls;
        if (t != null && channel.isOpen() && !channel.isBlocking()) {
            // close_notify, if the socket takes it now. Never while the socket blocks (the NBD handshake): this may
            // be the housekeeper's or the listener's thread, and a client that reads nothing would hold it for ever.
            t.closeQuietly();
        }
        try {
            channel.close();
        } catch (IOException e) {
            log.debug("connection {}: close failed", id, e);
        }
        ReadPipes pipes = readPipes;
        if (pipes != null) {
            pipes.closeDescriptor(); // our duplicate keeps the socket open: shut it down with the channel
        }
        Selector s = selector;
        if (s != null) {
            s.wakeup(); // a closed channel does not wake a selector it is registered with
        }
    }

    private void finish(String ending) {
        if (inTransmission) {
            // Let requests already at the device finish, so their buffers come back and their replies go out.
            long deadline = System.nanoTime() + server.config().drainTimeout().toNanos();
            paused = true; // completions and written replies wake us as they come
            while (!quiescent() && System.nanoTime() < deadline && outbox != null && !outbox.broken()
                    && channel.isOpen()) {
                awaitWritable();
            }
            exportMetrics.connectionClosed();
        }
        closeChannel();
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
        if (inTransmission) {
            log.info("connection {} from {}: {} after {} requests", id, peer, ending, requests);
        } else {
            log.debug("connection {} from {}: {}", id, peer, ending);
        }
        server.connectionEnded(this);
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
            closeChannel();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            closeChannel();
        }
    }

    /** During the handshake (blocking socket). */
    private void readMore() throws IOException {
        in.compact();
        int n;
        try {
            n = wire.read(in);
        } finally {
            in.flip();
        }
        if (n < 0) {
            throw new EOFException();
        }
    }

    /** During the handshake (blocking socket). */
    private void writeFully(ByteBuffer b) throws IOException {
        ByteBuffer[] one = {b};
        while (b.hasRemaining()) {
            wire.write(one, 0, 1);
        }
        wire.flush();
    }
}
