package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;

import java.io.EOFException;
import java.io.IOException;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;

/**
 * The ucx provider's control plane: the tcp provider's wire version 1 (same header, same messages for HELLO, the
 * region and lease operations, ZERO and FLUSH) on a TCP connection, extended, as version 1 is, only by new opcodes:
 * {@link #UCX_CONNECT}, {@link #MAP} and {@link #INVALIDATE}. READ and WRITE do not travel here: they are UCX GET and
 * PUT on the region memory. The layouts are tabled in {@code rdma/README.md}.
 */
final class Control {
    private Control() {
    }

    static final int MAGIC = 0x4D524252; // "RBRM", as the tcp provider
    static final int VERSION = 1;
    static final int HEADER = 24;
    /** Largest control message body (a LIST reply of many regions fits). */
    static final int MAX_BODY = 16 << 20;

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
    /** Client to memserver: exchange UCX worker addresses. */
    static final int UCX_CONNECT = 32;
    /** Client to memserver: the remote address and packed UCX remote key of a region (key checked). */
    static final int MAP = 33;
    /** Memserver to client: forget these regions' remote keys; the client answers once nothing of it is in flight. */
    static final int INVALIDATE = 34;

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
            case UCX_CONNECT -> "UCX_CONNECT";
            case MAP -> "MAP";
            case INVALIDATE -> "INVALIDATE";
            default -> "OP_" + opcode;
        };
    }

    /** A message being built: header first, body after; {@link #done} fixes the body length. */
    static ByteBuffer message(int opcode, long id, int status, int capacity) {
        ByteBuffer b = ByteBuffer.allocate(HEADER + capacity).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(MAGIC).putShort((short) VERSION).putShort((short) opcode).putLong(id).putInt(status).putInt(0);
        return b;
    }

    static ByteBuffer done(ByteBuffer b) {
        b.putInt(20, b.position() - HEADER);
        return b.flip();
    }

    static ByteBuffer error(int opcode, long id, int status, String message) {
        ByteBuffer b = message(opcode, id, status, stringLength(message));
        putString(b, message);
        return done(b);
    }

    record Header(int magic, int version, int opcode, long id, int status, int length) {
    }

    static Header readHeader(SocketChannel ch) throws IOException {
        ByteBuffer h = ByteBuffer.allocate(HEADER).order(ByteOrder.LITTLE_ENDIAN);
        readFully(ch, h);
        h.flip();
        return new Header(h.getInt(), Short.toUnsignedInt(h.getShort()), Short.toUnsignedInt(h.getShort()),
                h.getLong(), h.getInt(), h.getInt());
    }

    static ByteBuffer readBody(SocketChannel ch, int length) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(length).order(ByteOrder.LITTLE_ENDIAN);
        readFully(ch, b);
        return b.flip();
    }

    static void readFully(SocketChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            if (ch.read(b) < 0) {
                throw new EOFException();
            }
        }
    }

    static void writeFully(SocketChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            ch.write(b);
        }
    }

    static void putString(ByteBuffer dst, String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        int n = Math.min(b.length, 0xFFFF);
        dst.putShort((short) n).put(b, 0, n);
    }

    static int stringLength(String s) {
        return 2 + Math.min(s.getBytes(StandardCharsets.UTF_8).length, 0xFFFF);
    }

    static String getString(ByteBuffer src) {
        int n = Short.toUnsignedInt(src.getShort());
        if (n > src.remaining()) {
            throw new BufferUnderflowException();
        }
        byte[] b = new byte[n];
        src.get(b);
        return new String(b, StandardCharsets.UTF_8);
    }

    static void putBytes(ByteBuffer dst, ByteBuffer bytes) {
        dst.putInt(bytes.remaining()).put(bytes.duplicate());
    }

    /** A length-prefixed byte string as a direct buffer (what JUCX wants for addresses and keys). */
    static ByteBuffer getBytes(ByteBuffer src) {
        int n = src.getInt();
        if (n < 0 || n > src.remaining()) {
            throw new BufferUnderflowException();
        }
        ByteBuffer b = ByteBuffer.allocateDirect(n);
        b.put(src.slice(src.position(), n)).flip();
        src.position(src.position() + n);
        return b;
    }

    static void putTag(ByteBuffer dst, RegionTag tag) {
        putString(dst, tag.volume());
        dst.putLong(tag.slab()).putInt(tag.replica()).putLong(tag.generation());
    }

    static int tagLength(RegionTag tag) {
        return stringLength(tag.volume()) + 20;
    }

    static RegionTag getTag(ByteBuffer src) {
        String volume = getString(src);
        return new RegionTag(volume, src.getLong(), src.getInt(), src.getLong());
    }

    static void putDescriptor(ByteBuffer dst, RegionDescriptor d) {
        dst.putLong(d.id()).putLong(d.length()).putLong(d.key());
        putTag(dst, d.tag());
    }

    static int descriptorLength(RegionDescriptor d) {
        return 24 + tagLength(d.tag());
    }

    static RegionDescriptor getDescriptor(ByteBuffer src) {
        return new RegionDescriptor(src.getLong(), src.getLong(), src.getLong(), getTag(src));
    }

    static void tune(SocketChannel ch) throws IOException {
        ch.setOption(java.net.StandardSocketOptions.TCP_NODELAY, true);
        ch.setOption(java.net.StandardSocketOptions.SO_KEEPALIVE, true);
    }
}
