package dev.rbridge.rdma.wire;

import dev.rbridge.common.codec.FixedHeader;
import dev.rbridge.common.codec.Gather;
import dev.rbridge.common.codec.Skip;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Reads messages of the control protocol from the bytes of one connection, in one direction: a pure state machine.
 * Input may be split anywhere; {@link #next} consumes what it can and returns a message once one is complete. Every
 * length is checked against {@link Protocol}'s limits before anything is allocated for it, and a body that arrived
 * whole with its header is read where it lies, so a burst of small requests allocates nothing but the messages.
 *
 * <p>Data is not copied: a {@link Message.Write} (at a memserver) or a {@link Message.ReadReply} (at a client) is
 * returned as soon as its fixed fields are in, and the {@link #payloadRemaining()} bytes after it are the transport's to
 * move, straight from its input buffer and the socket into memory; it says how many it moved with
 * {@link #payloadMoved}, or leaves them to the decoder to drop with {@link #skipPayload}.
 *
 * <p>A memserver's decoder starts awaiting the greeting: anything but a HELLO of at most {@link
 * Protocol#MAX_HELLO_BODY} bytes then is malformed, so a peer without the token cannot make it buffer more.
 *
 * <p>Framing errors (bad magic, an impossible length, a request before the greeting, a version change mid-stream)
 * throw {@link MalformedMessageException}: the stream cannot be followed. A framed message that cannot be read (an
 * unknown opcode, a body of the wrong size or layout) is consumed and returned as {@link Message.Unreadable}, and the
 * connection goes on.
 */
public final class MessageDecoder {
    private enum State {
        HEADER, BODY, PAYLOAD, SKIP
    }

    /** The smallest region entry of a LIST reply: a descriptor with an empty volume name, an empty owner. */
    private static final int MIN_LIST_ENTRY = 24 + 2 + 20 + 2;

    private final boolean atMemserver;
    private boolean awaitingHello;
    /** After AUTH: only AUTH_PROOF may come next, as small as a greeting. */
    private boolean awaitingProof;
    private final FixedHeader header = new FixedHeader(Protocol.HEADER, ByteOrder.LITTLE_ENDIAN);
    private State state = State.HEADER;
    private int version;
    private int code;
    private long id;
    private int status;
    private int length;
    /** Bytes of the current body the message is read from (the rest, if any, is WRITE data). */
    private int bodyLength;
    /** The current body, gathered when it did not arrive whole with its header; null otherwise. */
    private ByteBuffer body;
    private int payloadRemaining;
    private final Skip skipping = new Skip();
    /** What to return once the bytes being skipped are consumed, or null. */
    private Message afterSkip;

    private MessageDecoder(boolean atMemserver) {
        this.atMemserver = atMemserver;
        this.awaitingHello = atMemserver;
    }

    /** Reads what clients send a memserver: requests (the greeting first), and answers to INVALIDATE. */
    public static MessageDecoder forMemserver() {
        return new MessageDecoder(true);
    }

    /** Reads what a memserver sends a client: replies, and INVALIDATE. */
    public static MessageDecoder forClient() {
        return new MessageDecoder(false);
    }

    /**
     * The next message, or null when {@code in} (little-endian, in read mode) ran dry first. Consumes the bytes of
     * the returned message and of nothing after it (a returned message's data, if any, is left in {@code in}).
     *
     * @throws MalformedMessageException when the stream cannot be framed any more
     * @throws IllegalStateException     when the last message's data has not been moved or skipped
     */
    public Message next(ByteBuffer in) throws MalformedMessageException {
        if (in.order() != ByteOrder.LITTLE_ENDIAN) {
            throw new IllegalArgumentException("the control protocol is little-endian");
        }
        while (true) {
            switch (state) {
                case HEADER -> {
                    ByteBuffer h = header.next(in);
                    if (h == null) {
                        return null;
                    }
                    readHeader(h);
                    Message m = atMemserver ? requestHeader() : replyHeader();
                    if (m != null) {
                        return m;
                    }
                }
                case BODY -> {
                    return body(in);
                }
                case PAYLOAD -> throw new IllegalStateException("the data of the last message has "
                        + payloadRemaining + " bytes not moved yet");
                case SKIP -> {
                    if (!skipping.drop(in)) {
                        return null;
                    }
                    state = State.HEADER;
                    Message m = afterSkip;
                    afterSkip = null;
                    if (m != null) {
                        return m;
                    }
                }
            }
        }
    }

    /** Bytes of the last message's data (WRITE request, READ reply) not moved yet; 0 when none is due. */
    public int payloadRemaining() {
        return state == State.PAYLOAD ? payloadRemaining : 0;
    }

    /** The transport moved {@code n} bytes of the data, from the input it feeds this decoder or from the socket. */
    public void payloadMoved(int n) {
        if (state != State.PAYLOAD || n < 0 || n > payloadRemaining) {
            throw new IllegalStateException(n + " bytes of data moved, " + payloadRemaining() + " were due");
        }
        payloadRemaining -= n;
        if (payloadRemaining == 0) {
            state = State.HEADER;
        }
    }

    /** The rest of the data is dropped: the decoder consumes it from the input as it comes (a refused WRITE). */
    public void skipPayload() {
        if (state != State.PAYLOAD) {
            throw new IllegalStateException("no data is due");
        }
        skipping.start(payloadRemaining);
        payloadRemaining = 0;
        afterSkip = null;
        state = State.SKIP;
    }

    /** The body length the last header announced: what the last message took on the wire after its header. */
    public int length() {
        return length;
    }

    /** A memserver's decoder before the greeting is over: only HELLO, or AUTH then AUTH_PROOF, may come. */
    public boolean awaitingHello() {
        return awaitingHello;
    }

    /** No message is partly read: the stream is at a message boundary. */
    public boolean atBoundary() {
        return state == State.HEADER && !header.partial();
    }

    // ---------------------------------------------------------------------------------------------- framing

    private void readHeader(ByteBuffer src) throws MalformedMessageException {
        int magic = src.getInt();
        version = Short.toUnsignedInt(src.getShort());
        code = Short.toUnsignedInt(src.getShort());
        id = src.getLong();
        status = src.getInt();
        length = src.getInt();
        if (magic != Protocol.MAGIC) {
            throw new MalformedMessageException("bad magic 0x" + Integer.toHexString(magic));
        }
        if (length < 0 || length > Protocol.MAX_BODY) {
            throw new MalformedMessageException("body length " + Integer.toUnsignedString(length) + " exceeds "
                    + Protocol.MAX_BODY);
        }
    }

    /** A memserver's decoder after a header: the message if it has no body to read, else null (body state set). */
    private Message requestHeader() throws MalformedMessageException {
        Opcode op = Opcode.of(code);
        if (awaitingProof || awaitingHello) {
            return greetingHeader(op);
        }
        if (version != Protocol.VERSION) {
            throw new MalformedMessageException("protocol version changed to " + version + " mid-stream");
        }
        if (op == null) {
            return skip(length, new Message.Unreadable(id, code, "unexpected " + Opcode.name(code)));
        }
        return switch (op) {
            case WRITE -> writeHeader();
            case READ -> fixed(Protocol.READ_BODY);
            case ZERO -> fixed(Protocol.ZERO_BODY);
            case FLUSH -> fixed(0);
            default -> {
                if (length > Protocol.MAX_CONTROL_BODY) {
                    throw new MalformedMessageException(op + " of " + length + " bytes (at most "
                            + Protocol.MAX_CONTROL_BODY + ")");
                }
                yield body(length);
            }
        };
    }

    /**
     * A memserver's decoder after a header during the greeting: HELLO or AUTH first, AUTH_PROOF after AUTH, each of at
     * most {@link Protocol#MAX_HELLO_BODY} bytes; anything else is malformed. A first greeting of another version is
     * skipped unread, as {@link Message.OtherVersion}.
     */
    private Message greetingHeader(Opcode op) throws MalformedMessageException {
        if (awaitingProof) {
            if (op != Opcode.AUTH_PROOF) {
                throw new MalformedMessageException("expected AUTH_PROOF after AUTH, got " + Opcode.name(code));
            }
            if (version != Protocol.VERSION) { // AUTH was of this version: the proof must be too
                throw new MalformedMessageException("protocol version changed to " + version + " mid-stream");
            }
            if (length > Protocol.MAX_HELLO_BODY) {
                throw new MalformedMessageException("AUTH_PROOF of " + length + " bytes (at most "
                        + Protocol.MAX_HELLO_BODY + ")");
            }
            return body(length);
        }
        if (op != Opcode.HELLO && op != Opcode.AUTH) {
            throw new MalformedMessageException("expected HELLO or AUTH first, got " + Opcode.name(code));
        }
        if (length > Protocol.MAX_HELLO_BODY) {
            throw new MalformedMessageException(op + " of " + length + " bytes (at most "
                    + Protocol.MAX_HELLO_BODY + ")");
        }
        if (version != Protocol.VERSION) {
            awaitingHello = false;
            return skip(length, new Message.OtherVersion(id, version)); // its layout may differ: not read
        }
        return body(length);
    }

    /** A WRITE request's header: its address is read as the body, its data left to the transport. */
    private Message writeHeader() {
        if (length < Protocol.DATA_ADDRESS) {
            return skip(length, new Message.Unreadable(id, code, "WRITE of " + length
                    + " bytes has no room for its address"));
        }
        // The body bound (MAX_BODY) leaves room for a control message's fields, not for more data: a WRITE carries at
        // most MAX_DATA, as a READ reply does.
        if (length - Protocol.DATA_ADDRESS > Protocol.MAX_DATA) {
            return skip(length, new Message.Unreadable(id, code, "WRITE of " + (length - Protocol.DATA_ADDRESS)
                    + " bytes of data (at most " + Protocol.MAX_DATA + ")"));
        }
        return body(Protocol.DATA_ADDRESS);
    }

    /** A client's decoder after a header: see {@link #requestHeader}. */
    private Message replyHeader() throws MalformedMessageException {
        if (status != 0) {
            return body(controlLength("error reply"));
        }
        Opcode op = Opcode.of(code);
        if (op == null) {
            return skip(length, new Message.Unreadable(id, code, "a reply of unknown opcode " + Opcode.name(code)));
        }
        return switch (op) {
            case READ -> {
                if (length > Protocol.MAX_DATA) {
                    throw new MalformedMessageException("READ reply of " + length + " bytes (at most "
                            + Protocol.MAX_DATA + ")");
                }
                yield finish(new Message.ReadReply(id, length), length);
            }
            case WRITE -> skip(length, new Message.WriteReply(id));
            case ZERO -> skip(length, new Message.ZeroReply(id));
            case FLUSH -> skip(length, new Message.FlushReply(id));
            case RELEASE -> skip(length, new Message.ReleaseReply(id));
            case UNLEASE -> skip(length, new Message.UnleaseReply(id));
            case HELLO -> version != Protocol.VERSION ? skip(length, new Message.OtherVersion(id, version))
                    : body(controlLength("HELLO reply"));
            case LIST, INVALIDATE -> body(length); // many regions: up to the largest body
            default -> body(controlLength(op + " reply"));
        };
    }

    private int controlLength(String what) throws MalformedMessageException {
        if (length > Protocol.MAX_CONTROL_BODY) {
            throw new MalformedMessageException(what + " of " + length + " bytes (at most "
                    + Protocol.MAX_CONTROL_BODY + ")");
        }
        return length;
    }

    /** A request of fixed body size: read, or skipped and unreadable when its header says another size. */
    private Message fixed(int expected) {
        if (length != expected) {
            return skip(length, new Message.Unreadable(id, code, Opcode.name(code) + " body must be " + expected
                    + " bytes, was " + length));
        }
        return body(expected);
    }

    /** Enters the body state for {@code n} bytes (no more than the limit checked by the caller). */
    private Message body(int n) {
        bodyLength = n;
        state = State.BODY;
        return null;
    }

    private Message skip(long n, Message then) {
        if (n == 0) {
            state = State.HEADER;
            return then;
        }
        skipping.start(n);
        afterSkip = then;
        state = State.SKIP;
        return null;
    }

    /** Reads the body from {@code in}, in place when it is all there, else gathered; null while incomplete. */
    private Message body(ByteBuffer in) throws MalformedMessageException {
        if (body == null) {
            if (in.remaining() >= bodyLength) {
                int limit = in.limit();
                int end = in.position() + bodyLength;
                in.limit(end);
                try {
                    return parsed(in);
                } finally {
                    in.limit(limit);
                    in.position(end);
                }
            }
            body = ByteBuffer.allocate(bodyLength).order(ByteOrder.LITTLE_ENDIAN); // within the checked limit
        }
        if (!Gather.into(body, in)) {
            return null;
        }
        ByteBuffer b = body.flip();
        body = null;
        return parsed(b);
    }

    /** The message of a complete body; a body that does not parse is unreadable (or malformed, as a greeting). */
    private Message parsed(ByteBuffer b) throws MalformedMessageException {
        Message m;
        try {
            m = atMemserver ? request(b) : reply(b);
        } catch (BufferUnderflowException | IllegalArgumentException e) {
            String why = e.getMessage() == null ? "truncated" : e.getMessage();
            if (awaitingHello) {
                throw new MalformedMessageException(Opcode.name(code) + " body is malformed (" + why + ")");
            }
            state = State.HEADER;
            return new Message.Unreadable(id, code, (atMemserver ? "" : "reply to ") + Opcode.name(code)
                    + " body is malformed (" + why + ")");
        }
        if (m instanceof Message.Hello || m instanceof Message.AuthProof) {
            awaitingHello = false;
            awaitingProof = false;
        } else if (m instanceof Message.AuthStart) {
            awaitingProof = true;
        }
        return finish(m, m instanceof Message.Write w ? w.length() : 0);
    }

    private Message finish(Message m, int payload) {
        if (payload > 0) {
            payloadRemaining = payload;
            state = State.PAYLOAD;
        } else {
            state = State.HEADER;
        }
        return m;
    }

    // ---------------------------------------------------------------------------------------------- bodies

    private Message request(ByteBuffer b) {
        return switch (Opcode.of(code)) { // the data path's messages first
            case READ -> {
                Message.Read r = new Message.Read(id, b.getLong(), b.getLong(), b.getLong(), b.getInt());
                if (r.length() < 0 || r.length() > Protocol.MAX_DATA) {
                    yield new Message.Unreadable(id, code, "READ of " + Integer.toUnsignedString(r.length())
                            + " bytes exceeds " + Protocol.MAX_DATA);
                }
                yield r;
            }
            case WRITE -> new Message.Write(id, b.getLong(), b.getLong(), b.getLong(),
                    length - Protocol.DATA_ADDRESS);
            case ZERO -> new Message.Zero(id, b.getLong(), b.getLong(), b.getLong(), b.getLong());
            case FLUSH -> new Message.Flush(id);
            case HELLO -> new Message.Hello(id, getString(b), getString(b));
            case ALLOCATE -> {
                long n = b.getLong();
                yield new Message.Allocate(id, n, getTag(b));
            }
            case OPEN -> new Message.Open(id, b.getLong());
            case LIST -> new Message.ListRegions(id);
            case RELEASE -> new Message.Release(id, b.getLong(), b.getLong());
            case RETAG -> {
                long region = b.getLong();
                long key = b.getLong();
                yield new Message.Retag(id, region, key, getTag(b));
            }
            case LEASE -> new Message.Lease(id, getString(b), getString(b), b.getLong(),
                    b.remaining() >= 8 ? b.getLong() : dev.rbridge.rdma.Lease.NO_ID);
            case UNLEASE -> new Message.Unlease(id, getString(b), getString(b),
                    b.remaining() >= 8 ? b.getLong() : dev.rbridge.rdma.Lease.NO_ID);
            case INFO -> new Message.Info(id);
            case STATE -> new Message.State(id);
            case UCX_CONNECT -> new Message.UcxConnect(id, b.hasRemaining() ? getBytes(b) : WireBytes.EMPTY);
            case MAP -> new Message.MapRegion(id, b.getLong(), b.getLong(), b.getLong());
            case INVALIDATE -> new Message.InvalidateDone(id);
            case UCX_PROBE -> new Message.UcxProbe(id);
            case AUTH -> {
                String name = getString(b);
                yield new Message.AuthStart(id, name, getBytes(b));
            }
            case AUTH_PROOF -> new Message.AuthProof(id, getBytes(b));
        };
    }

    private Message reply(ByteBuffer b) {
        if (status != 0) {
            return new Message.Error(id, code, status, b.remaining() >= 2 ? getString(b) : "");
        }
        return switch (Opcode.of(code)) {
            case HELLO -> new Message.HelloReply(id, getString(b), b.getLong(), b.getLong());
            case ALLOCATE -> new Message.AllocateReply(id, getDescriptor(b));
            case OPEN -> new Message.OpenReply(id, getDescriptor(b));
            case LIST -> listReply(b);
            case RETAG -> new Message.RetagReply(id, getDescriptor(b));
            case LEASE -> leaseReply(b);
            case INFO -> new Message.InfoReply(id, getString(b), b.getLong(), b.getLong());
            case STATE -> new Message.StateReply(id, b.getInt());
            case UCX_CONNECT -> new Message.UcxConnectReply(id, getBytes(b));
            case MAP -> {
                long address = b.getLong();
                long n = b.getLong();
                yield new Message.MapReply(id, address, n, getBytes(b));
            }
            case UCX_PROBE -> {
                long address = b.getLong();
                yield new Message.UcxProbeReply(id, address, getBytes(b));
            }
            case AUTH -> new Message.AuthChallenge(id, getBytes(b));
            case AUTH_PROOF -> {
                String serverId = getString(b);
                long capacity = b.getLong();
                long free = b.getLong();
                yield new Message.AuthWelcome(id, serverId, capacity, free, getBytes(b));
            }
            case INVALIDATE -> invalidate(b);
            // replies without a body, and READ's, are decided by the header
            case READ, WRITE, ZERO, FLUSH, RELEASE, UNLEASE -> throw new IllegalStateException(Opcode.name(code));
        };
    }

    /** A LIST reply: a count, checked against the bytes there are before anything is allocated, and the regions. */
    private Message listReply(ByteBuffer b) {
        int n = b.getInt();
        if (n < 0 || n > b.remaining() / MIN_LIST_ENTRY) {
            throw new IllegalArgumentException("it claims " + Integer.toUnsignedString(n) + " regions in "
                    + b.remaining() + " bytes");
        }
        List<RegionInfo> regions = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            regions.add(new RegionInfo(getDescriptor(b), getString(b)));
        }
        return new Message.ListReply(id, regions);
    }

    /**
     * A LEASE reply: its ttl and takeover flag, then what later memservers added (the owner-change count; the epoch,
     * lease id and continued flag, all three or none), each read as unknown when absent.
     */
    private Message leaseReply(ByteBuffer b) {
        long ttl = b.getLong();
        boolean tookOver = b.get() != 0;
        long changes = b.remaining() >= 8 ? b.getLong() : dev.rbridge.rdma.Lease.UNKNOWN_OWNER_CHANGES;
        if (b.remaining() < 17) {
            return new Message.LeaseReply(id, ttl, tookOver, changes);
        }
        long epoch = b.getLong();
        long leaseId = b.getLong();
        return new Message.LeaseReply(id, ttl, tookOver, changes, epoch, leaseId, b.get() != 0);
    }

    /** An INVALIDATE: a count, checked against the bytes there are before anything is allocated, and the regions. */
    private Message invalidate(ByteBuffer b) {
        int n = b.getInt();
        if (n < 0 || n > b.remaining() / 8) {
            throw new IllegalArgumentException("it claims " + Integer.toUnsignedString(n) + " regions in "
                    + b.remaining() + " bytes");
        }
        List<Long> regions = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            regions.add(b.getLong());
        }
        return new Message.Invalidate(id, regions);
    }

    // ---------------------------------------------------------------------------------------------- fields

    private static String getString(ByteBuffer src) {
        int n = Short.toUnsignedInt(src.getShort());
        if (n > src.remaining()) {
            throw new IllegalArgumentException("a string of " + n + " bytes overruns it");
        }
        byte[] b = new byte[n];
        src.get(b);
        return new String(b, StandardCharsets.UTF_8);
    }

    private static WireBytes getBytes(ByteBuffer src) {
        int n = src.getInt();
        if (n < 0 || n > src.remaining()) {
            throw new IllegalArgumentException(
                    "a byte string of " + Integer.toUnsignedString(n) + " bytes overruns it");
        }
        WireBytes b = WireBytes.copyOf(src.slice(src.position(), n));
        src.position(src.position() + n);
        return b;
    }

    private static RegionTag getTag(ByteBuffer src) {
        String volume = getString(src);
        return new RegionTag(volume, src.getLong(), src.getInt(), src.getLong());
    }

    private static RegionDescriptor getDescriptor(ByteBuffer src) {
        long region = src.getLong();
        long n = src.getLong();
        long key = src.getLong();
        return new RegionDescriptor(region, n, key, getTag(src));
    }
}
