package dev.rbridge.nbd.server;

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
import java.nio.channels.SocketChannel;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

/**
 * One client connection, run by one platform thread: the handshake, then the transmission loop. The thread reads and
 * decodes requests and hands them to the device; replies go out through the {@link Outbox} from whichever thread
 * completes them, in completion order. A protocol violation ends this connection only.
 */
final class Connection implements Runnable {
    private static final Logger log = LoggerFactory.getLogger(Connection.class);
    /** Small enough that little of a large WRITE payload is copied through it (the rest goes straight to its buffer). */
    private static final int READ_BUFFER = 64 << 10;
    private static final int MAX_OPTIONS = 4096;
    private static final int BASE_ALLOCATION_ID = 1;
    /** Extents per BLOCK_STATUS reply; the spec lets a server stop early, and clients ask again from there. */
    private static final int MAX_EXTENTS = 4096;
    static final int HANDSHAKE_FLAGS = Nbd.FLAG_FIXED_NEWSTYLE | Nbd.FLAG_NO_ZEROES;

    private final NbdServer server;
    private final SocketChannel channel;
    private final long id;
    private final String peer;
    private final ByteBuffer in = ByteBuffer.allocateDirect(READ_BUFFER).flip();
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
    private Outbox outbox;
    private Semaphore inFlight;
    private volatile boolean draining;
    private long requests;

    Connection(NbdServer server, SocketChannel channel, long id, String peer) {
        this.server = server;
        this.channel = channel;
        this.id = id;
        this.peer = peer;
        this.metrics = server.config().metrics();
    }

    long id() {
        return id;
    }

    boolean inTransmission() {
        return inTransmission;
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
            log.warn("connection {} from {}: {}; closing this connection only", id, peer, ending);
        } catch (ClosedChannelException e) {
            ending = server.closing() ? "server shutdown"
                    : inTransmission ? "connection closed" : "handshake not finished in time or connection closed";
        } catch (IOException e) {
            ending = "I/O error: " + e.getMessage();
        } catch (RuntimeException e) {
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
            switch (option) {
                case OptionRequest.ExportName o -> {
                    Export e = server.config().export(o.name());
                    if (e == null) {
                        // EXPORT_NAME has no error reply: the spec's only answer is to close.
                        log.info("connection {} from {}: asked for unknown export '{}' with EXPORT_NAME; closing",
                                id, peer, o.name());
                        return false;
                    }
                    writeFully(HandshakeEncoder.exportNameReply(e.size(), transmissionFlags(e), clientFlags.noZeroes()));
                    enterTransmission(e);
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
                case OptionRequest.StartTls o ->
                        reply(o, Nbd.REP_ERR_UNSUP, "TLS is not supported by this server");
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
        writeFully(HandshakeEncoder.ack(o.option()));
        if (o.go()) {
            enterTransmission(e);
            return true;
        }
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

    private void enterTransmission(Export e) {
        export = e;
        device = e.device();
        if (metaContextExport != e) {
            baseAllocation = false; // contexts negotiated for another export do not carry over
        }
        outbox = new Outbox(channel, server.bufferPool(), this::closeChannel);
        inFlight = new Semaphore(server.config().maxInFlightPerConnection());
        inTransmission = true;
        exportMetrics = metrics.export(e.name());
        exportMetrics.connectionOpened();
        log.info("connection {} from {}: serving export '{}' ({} bytes{}{})", id, peer, e.name(), e.size(),
                e.readOnly() ? ", read-only" : "", structured ? ", structured replies" : "");
    }

    // --------------------------------------------------------------------------------------------- transmission

    private void transmission() throws IOException, NbdProtocolException {
        RequestDecoder decoder = new RequestDecoder(server.bufferPool()::acquire, export.maximumPayload());
        while (true) {
            outbox.cork();
            Request r;
            try {
                while ((r = decoder.next(in)) != null) {
                    if (r.type() == Nbd.CMD_DISC) {
                        log.debug("connection {}: NBD_CMD_DISC", id);
                        return;
                    }
                    dispatch(r);
                }
            } finally {
                outbox.uncork();
            }
            if (outbox.broken()) {
                throw new ClosedChannelException();
            }
            ByteBuffer sink = decoder.payloadSink();
            if (sink != null && sink.remaining() > in.capacity() / 2) {
                // A large WRITE payload goes from the socket straight into its buffer.
                if (channel.read(sink) < 0) {
                    throw new EOFException();
                }
                continue;
            }
            readMore();
        }
    }

    private void dispatch(Request r) {
        requests++;
        long start = System.nanoTime();
        exportMetrics.requestStarted(r.type());
        if (draining) {
            if (structured) {
                fail(r, start, Errno.ESHUTDOWN, "server is shutting down");
            } else {
                // Simple replies mean the Linux kernel (it uses nothing else), which turns any error reply into EIO
                // for the filesystem. Left unanswered, the request is requeued by the kernel once the connection
                // closes and its timeout passes, onto a reconnected socket (rbridge attach, nbd-client -persist): a
                // bridge restart then costs a pause, not an I/O error. The spec's ESHUTDOWN is a MAY-speed-up.
                server.bufferPool().release(r.payload());
                exportMetrics.requestCompleted(r.type(), 0, System.nanoTime() - start, Errno.ESHUTDOWN);
                log.debug("connection {}: {} left unanswered: shutting down", id, r);
            }
            return;
        }
        Rejection rejection = validate(r);
        if (rejection != null) {
            fail(r, start, rejection.errno(), rejection.reason());
            return;
        }
        acquireSlot();
        boolean fua = r.hasFlag(Nbd.CMD_FLAG_FUA);
        CompletableFuture<?> op;
        try {
            op = switch (r.type()) {
                case Nbd.CMD_READ -> read(r, start);
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
            server.bufferPool().release(r.payload());
            if (t == null) {
                complete(r, start, null, new Reply.Simple(r.handle(), 0, null));
            } else {
                failed(r, start, t);
            }
        });
    }

    private CompletableFuture<?> read(Request r, long start) {
        int length = (int) r.length();
        if (length == 0) {
            complete(r, start, null, structured ? new Reply.Done(r.handle()) : new Reply.Simple(r.handle(), 0, null));
            return CompletableFuture.completedFuture(null);
        }
        ByteBuffer buffer = server.bufferPool().acquire(length);
        CompletableFuture<Void> f;
        try {
            f = device.read(r.offset(), buffer);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete((v, t) -> {
            if (t != null) {
                server.bufferPool().release(buffer);
                failed(r, start, t);
                return;
            }
            buffer.position(0).limit(length);
            complete(r, start, null, structured ? new Reply.ReadData(r.handle(), r.offset(), buffer)
                    : new Reply.Simple(r.handle(), 0, buffer));
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

    private void acquireSlot() {
        if (!inFlight.tryAcquire()) {
            outbox.uncork(); // let finished replies out while we wait for room
            inFlight.acquireUninterruptibly();
            outbox.cork();
        }
    }

    /** Replies with an error to a request that never reached the device. */
    private void fail(Request r, long start, Errno errno, String message) {
        server.bufferPool().release(r.payload());
        log.debug("connection {}: {} -> {} ({})", id, r, errno, message);
        acquireSlot();
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
            log.warn("connection {}: {} failed on export '{}'", id, r, export.name(), cause);
        }
        complete(r, start, errno, errorReply(r, errno, message));
    }

    private Reply errorReply(Request r, Errno errno, String message) {
        return structured ? new Reply.Error(r.handle(), errno.code(), ReplyEncoder.message(message))
                : new Reply.Simple(r.handle(), errno.code(), null);
    }

    private void complete(Request r, long start, Errno errno, Reply reply) {
        long bytes = r.type() == Nbd.CMD_READ || r.type() == Nbd.CMD_WRITE ? r.length() : 0;
        exportMetrics.requestCompleted(r.type(), bytes, System.nanoTime() - start, errno);
        outbox.send(reply);
        inFlight.release();
    }

    // ----------------------------------------------------------------------------------------------- lifecycle

    /**
     * Stops taking new requests so in-flight ones can finish: with structured replies they get ESHUTDOWN; with simple
     * replies (the kernel) they get no answer, and the client retries them after the connection closes.
     */
    void beginDrain() {
        draining = true;
    }

    /** True when nothing is in flight and every reply has been written. */
    boolean quiescent() {
        return !inTransmission || (inFlight.availablePermits() == server.config().maxInFlightPerConnection()
                && outbox.idle());
    }

    void closeChannel() {
        try {
            channel.close();
        } catch (IOException e) {
            log.debug("connection {}: close failed", id, e);
        }
    }

    private void finish(String ending) {
        if (inTransmission) {
            // Let requests already at the device finish, so their buffers come back and their replies go out.
            long deadline = System.nanoTime() + server.config().drainTimeout().toNanos();
            while (!quiescent() && System.nanoTime() < deadline && !outbox.broken()) {
                sleepQuietly();
            }
            exportMetrics.connectionClosed();
        }
        closeChannel();
        if (inTransmission) {
            log.info("connection {} from {}: {} after {} requests", id, peer, ending, requests);
        } else {
            log.debug("connection {} from {}: {}", id, peer, ending);
        }
        server.connectionEnded(this);
    }

    private static void sleepQuietly() {
        try {
            TimeUnit.MILLISECONDS.sleep(1);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private void readMore() throws IOException {
        in.compact();
        int n;
        try {
            n = channel.read(in);
        } finally {
            in.flip();
        }
        if (n < 0) {
            throw new EOFException();
        }
    }

    private void writeFully(ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            channel.write(b);
        }
    }
}
