package dev.rbridge.nbd.server;

import dev.rbridge.common.Printable;
import dev.rbridge.nbd.protocol.ClientFlags;
import dev.rbridge.nbd.protocol.HandshakeDecoder;
import dev.rbridge.nbd.protocol.HandshakeEncoder;
import dev.rbridge.nbd.protocol.HandshakeMessage;
import dev.rbridge.nbd.protocol.Nbd;
import dev.rbridge.nbd.protocol.NbdProtocolException;
import dev.rbridge.nbd.protocol.OptionRequest;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;
import java.util.function.Predicate;
import java.util.function.Supplier;

/**
 * The fixed-newstyle handshake of one connection, on its blocking socket: the greeting, then option haggling until the
 * client enters transmission (NBD_OPT_GO or NBD_OPT_EXPORT_NAME) or leaves. Every option gets its answer, the bad ones
 * their {@code NBD_REP_ERR_*}; STARTTLS swaps the wire and starts the haggling over. What was agreed comes back as a
 * {@link Session}.
 *
 * <p>The connection enters transmission before the client hears that it may: the {@code enter} callback gets the
 * session first, and when it says no (the server has no slot for a connection let in over its limits after all) the
 * client is let go.
 */
final class Handshake {
    /** The connection's log lines, under its name. */
    private static final Logger log = LoggerFactory.getLogger(Connection.class);
    static final int HANDSHAKE_FLAGS = Nbd.FLAG_FIXED_NEWSTYLE | Nbd.FLAG_NO_ZEROES;
    /** How much of a name a peer sent a log line shows. */
    private static final int LOGGED_NAME_BYTES = 128;
    /** Options are streamed through the decoder, so this needs only hold what one read brings. */
    private static final int HANDSHAKE_BUFFER = 4 << 10;
    private static final int MAX_OPTIONS = 4096;

    private final NbdServer server;
    private final SocketChannel channel;
    private final long id;
    private final String peer;
    private final NbdServerMetrics metrics;
    private final Predicate<Session> enter;
    private final Supplier<ClosedChannelException> noSlot;
    /** The socket, or TLS over it once the client asked for it (STARTTLS). */
    private Wire wire;
    private SecureWire tls;
    private ByteBuffer in = ByteBuffer.allocate(HANDSHAKE_BUFFER).flip();

    // negotiated so far (STARTTLS forgets it)
    private ClientFlags clientFlags = new ClientFlags(0);
    private boolean structured;
    private Export metaContextExport;
    private boolean baseAllocation;
    /** Set when the client entered transmission. */
    private Session agreed;

    /**
     * @param enter  called with the session when the client asks to enter transmission, before it hears the answer;
     *               false when the server has no slot for it (nothing changed, and the client must be let go)
     * @param noSlot marks the connection as closing for want of a slot, and gives what ends it
     */
    Handshake(NbdServer server, SocketChannel channel, long id, String peer, Predicate<Session> enter,
            Supplier<ClosedChannelException> noSlot) {
        this.server = server;
        this.channel = channel;
        this.wire = Wire.of(channel);
        this.id = id;
        this.peer = peer;
        this.metrics = server.config().metrics();
        this.enter = enter;
        this.noSlot = noSlot;
    }

    /** Runs the handshake: the session the client entered transmission with, or null when it left cleanly. */
    Session run() throws IOException, NbdProtocolException {
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
            if (answer((OptionRequest) message)) {
                return agreed;
            }
        }
    }

    /** What the client sent after the handshake's last bytes: the first of transmission's. */
    ByteBuffer leftover() {
        return in;
    }

    /** Answers one option; true when the handshake is over (the client entered transmission, or must go). */
    private boolean answer(OptionRequest option) throws IOException, NbdProtocolException {
        if (server.closing() && !(option instanceof OptionRequest.Abort)) {
            reply(option, Nbd.REP_ERR_SHUTDOWN, "server is shutting down");
            return false;
        }
        if (tls == null && server.config().tls().required()
                && !(option instanceof OptionRequest.StartTls || option instanceof OptionRequest.Abort)) {
            if (option instanceof OptionRequest.ExportName) {
                // EXPORT_NAME has no error reply: the spec's only answer is to close.
                server.logLimited("export_name_in_clear", "connection {} from {}: asked for an export in clear "
                        + "(EXPORT_NAME) where TLS is required; closing", id, peer);
                return true;
            }
            metrics.tlsRefused("tls_required");
            reply(option, Nbd.REP_ERR_TLS_REQD, "this server requires TLS: negotiate NBD_OPT_STARTTLS first "
                    + "(an nbds:// URI)");
            return false;
        }
        switch (option) {
            case OptionRequest.ExportName o -> {
                return exportName(o);
            }
            case OptionRequest.Abort o -> {
                writeFully(HandshakeEncoder.ack(o.option()));
                return true;
            }
            case OptionRequest.ListExports o -> listExports(o);
            case OptionRequest.StartTls o -> startTls(o);
            case OptionRequest.ExtendedHeaders o ->
                    reply(o, Nbd.REP_ERR_UNSUP, "extended headers are not supported by this server");
            case OptionRequest.StructuredReply o -> {
                structured = true;
                writeFully(HandshakeEncoder.ack(o.option()));
            }
            case OptionRequest.Info o -> {
                return info(o);
            }
            case OptionRequest.MetaContext o -> metaContext(o);
            case OptionRequest.Unknown o ->
                    reply(o, Nbd.REP_ERR_UNSUP, "option " + Nbd.optionName(o.option()) + " is not supported");
            case OptionRequest.Malformed o -> reply(o, Nbd.REP_ERR_INVALID, o.reason());
            case OptionRequest.TooBig o -> reply(o, Nbd.REP_ERR_TOO_BIG,
                    "option data of " + o.length() + " bytes is more than this server accepts");
        }
        return false;
    }

    /** NBD_OPT_EXPORT_NAME: the old way in, with no error reply; every refusal closes. True: the handshake is over. */
    private boolean exportName(OptionRequest.ExportName o) throws IOException {
        Export e = server.config().export(o.name());
        if (e == null) {
            // EXPORT_NAME has no error reply: the spec's only answer is to close.
            // The name is the peer's: shown printable and short, and at most a line every few seconds.
            server.logLimited("unknown_export", "connection {} from {}: asked for unknown export '{}' "
                    + "with EXPORT_NAME; closing", id, peer, Printable.cut(o.name(), LOGGED_NAME_BYTES));
            return true;
        }
        int flags = transmissionFlags(e);
        if (!agree(e, flags)) { // before the client hears it (see info)
            throw noSlot.get(); // EXPORT_NAME has no error reply: the answer is to close
        }
        writeFully(HandshakeEncoder.exportNameReply(e.size(), flags, clientFlags.noZeroes()));
        return true;
    }

    private void listExports(OptionRequest.ListExports o) throws IOException {
        for (Export e : server.config().exports()) {
            writeFully(HandshakeEncoder.reply(o.option(), Nbd.REP_SERVER,
                    HandshakeEncoder.server(e.name(), e.description())));
        }
        writeFully(HandshakeEncoder.ack(o.option()));
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

    /** NBD_OPT_INFO and NBD_OPT_GO. True when the client entered transmission. */
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
            if (!agree(e, flags)) {
                reply(o, Nbd.REP_ERR_POLICY, "no connection slot is free on this server now; try again later");
                throw noSlot.get();
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
            writeFully(HandshakeEncoder.reply(o.option(), Nbd.REP_META_CONTEXT, HandshakeEncoder.metaContext(
                    o.set() ? Session.BASE_ALLOCATION_ID : 0, Nbd.CONTEXT_BASE_ALLOCATION)));
        }
        writeFully(HandshakeEncoder.ack(o.option()));
    }

    /**
     * Enters transmission with {@code e}, if the connection may: false, and nothing agreed, when the server has no slot
     * for it after all.
     */
    private boolean agree(Export e, int flags) {
        // contexts negotiated for another export do not carry over
        Session session = Session.of(e, flags, structured, baseAllocation && metaContextExport == e, clientFlags, tls);
        if (!enter.test(session)) {
            return false;
        }
        agreed = session;
        return true;
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

    /** Blocking: reads what the socket has into {@link #in}. */
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

    /** Blocking: writes all of {@code b}. */
    private void writeFully(ByteBuffer b) throws IOException {
        ByteBuffer[] one = {b};
        while (b.hasRemaining()) {
            wire.write(one, 0, 1);
        }
        wire.flush();
    }
}
