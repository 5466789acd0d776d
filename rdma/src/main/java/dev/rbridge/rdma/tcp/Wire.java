package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;

/**
 * The tcp provider's wire format, version {@value #VERSION}; the layouts are tabled in {@code rdma/README.md}.
 * Little-endian. Every message is a 24-byte header and {@code length} bytes of body.
 *
 * <p>Operations are only ever added, with new opcodes, never changed: every message of a given opcode keeps its layout,
 * so the version stays 1. A memserver that predates an opcode answers it with {@code BAD_REQUEST} ("unexpected
 * OP_n") and the connection goes on. The version changes when an existing message's layout or meaning does.
 */
final class Wire {
    private Wire() {
    }

    static final int MAGIC = 0x4D524252; // bytes "RBRM" on the wire
    static final int VERSION = 1;
    static final int HEADER = 24;
    /** Largest READ or WRITE data in one operation; larger operations are split by the client. */
    static final int MAX_DATA = 16 << 20;
    /** Largest body of any message: data plus the fixed fields of READ/WRITE, or a LIST reply. */
    static final int MAX_BODY = MAX_DATA + 64;

    static final int HELLO = 1;
    static final int ALLOCATE = 2;
    static final int OPEN = 3;
    static final int LIST = 4;
    static final int RELEASE = 5;
    static final int RETAG = 6;
    static final int LEASE = 7;
    static final int UNLEASE = 8;
    static final int INFO = 9;
    static final int READ = 16;
    static final int WRITE = 17;
    static final int ZERO = 18;
    static final int FLUSH = 19;

    /** region id, key, offset: the fixed part of READ, WRITE and ZERO. */
    static final int DATA_ADDRESS = 24;

    /** Data at least this large is a large transfer: the read after it fetches only the next header (see readMore). */
    static final int LARGE = 64 << 10;

    /** Socket buffer size on both ends: room for several large transfers in flight without stalls. */
    static final int SOCKET_BUFFER = 4 << 20;

    static void tune(java.nio.channels.SocketChannel ch) throws java.io.IOException {
        ch.setOption(java.net.StandardSocketOptions.TCP_NODELAY, true);
        // A peer whose machine vanished without a FIN or RST is found by the kernel eventually, freeing its thread.
        ch.setOption(java.net.StandardSocketOptions.SO_KEEPALIVE, true);
        ch.setOption(java.net.StandardSocketOptions.SO_SNDBUF, SOCKET_BUFFER);
        ch.setOption(java.net.StandardSocketOptions.SO_RCVBUF, SOCKET_BUFFER);
    }

    /** One read from {@code ch} appended to the unread bytes of {@code in} (kept in read mode); EOF at end of stream. */
    static void readMore(java.nio.channels.SocketChannel ch, ByteBuffer in) throws java.io.IOException {
        readMore(ch, in, Integer.MAX_VALUE);
    }

    /**
     * As {@link #readMore(java.nio.channels.SocketChannel, ByteBuffer)}, but reading no more than is needed to hold
     * {@code upTo} unread bytes: used after a large transfer, so that the next message's data, likely large too, goes
     * straight from the socket to its destination instead of through {@code in} and a copy.
     */
    static void readMore(java.nio.channels.SocketChannel ch, ByteBuffer in, int upTo) throws java.io.IOException {
        in.compact();
        int r;
        try {
            if (upTo < in.remaining() + in.position() && upTo > in.position()) {
                in.limit(upTo);
            }
            r = ch.read(in);
        } finally {
            in.limit(in.capacity());
            in.flip();
        }
        if (r < 0) {
            throw new java.io.EOFException();
        }
    }

    static ByteBuffer allocate(int capacity) {
        return ByteBuffer.allocate(capacity).order(ByteOrder.LITTLE_ENDIAN);
    }

    static void header(ByteBuffer dst, int opcode, long id, int status, int length) {
        dst.putInt(MAGIC).putShort((short) VERSION).putShort((short) opcode).putLong(id).putInt(status).putInt(length);
    }

    static String opName(int opcode) {
        return switch (opcode) {
            case HELLO -> "HELLO";
            case ALLOCATE -> "ALLOCATE";
            case OPEN -> "OPEN";
            case LIST -> "LIST";
            case RELEASE -> "RELEASE";
            case RETAG -> "RETAG";
            case LEASE -> "LEASE";
            case UNLEASE -> "UNLEASE";
            case INFO -> "INFO";
            case READ -> "READ";
            case WRITE -> "WRITE";
            case ZERO -> "ZERO";
            case FLUSH -> "FLUSH";
            default -> "OP_" + opcode;
        };
    }

    static void putString(ByteBuffer dst, String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        int n = Math.min(b.length, 0xFFFF);
        dst.putShort((short) n).put(b, 0, n);
    }

    static int stringLength(String s) {
        return 2 + Math.min(s.getBytes(StandardCharsets.UTF_8).length, 0xFFFF);
    }

    static String getString(ByteBuffer src) throws MalformedMessageException {
        int n = Short.toUnsignedInt(src.getShort());
        if (n > src.remaining()) {
            throw new MalformedMessageException("string of " + n + " bytes overruns the message");
        }
        byte[] b = new byte[n];
        src.get(b);
        return new String(b, StandardCharsets.UTF_8);
    }

    static void putTag(ByteBuffer dst, RegionTag tag) {
        putString(dst, tag.volume());
        dst.putLong(tag.slab()).putInt(tag.replica()).putLong(tag.generation());
    }

    static int tagLength(RegionTag tag) {
        return stringLength(tag.volume()) + 20;
    }

    static RegionTag getTag(ByteBuffer src) throws MalformedMessageException {
        String volume = getString(src);
        try {
            return new RegionTag(volume, src.getLong(), src.getInt(), src.getLong());
        } catch (IllegalArgumentException e) {
            throw new MalformedMessageException(e.getMessage());
        }
    }

    static void putDescriptor(ByteBuffer dst, RegionDescriptor d) {
        dst.putLong(d.id()).putLong(d.length()).putLong(d.key());
        putTag(dst, d.tag());
    }

    static int descriptorLength(RegionDescriptor d) {
        return 24 + tagLength(d.tag());
    }

    static RegionDescriptor getDescriptor(ByteBuffer src) throws MalformedMessageException {
        return new RegionDescriptor(src.getLong(), src.getLong(), src.getLong(), getTag(src));
    }

    /** Runs a body parser, turning a short body into {@link MalformedMessageException}. */
    static <T> T parse(String what, BodyParser<T> parser) throws MalformedMessageException {
        try {
            return parser.parse();
        } catch (BufferUnderflowException e) {
            throw new MalformedMessageException(what + " body is truncated");
        }
    }

    interface BodyParser<T> {
        T parse() throws MalformedMessageException;
    }

    /** A message that cannot be understood; the connection that sent it is closed. */
    static final class MalformedMessageException extends Exception {
        MalformedMessageException(String message) {
            super(message);
        }
    }
}
