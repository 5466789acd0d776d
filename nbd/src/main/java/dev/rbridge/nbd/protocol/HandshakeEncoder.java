package dev.rbridge.nbd.protocol;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/** Encodes what the server sends during the handshake. Each method returns a flipped buffer ready to write. */
public final class HandshakeEncoder {
    private HandshakeEncoder() {}

    public static ByteBuffer greeting(int handshakeFlags) {
        return ByteBuffer.allocate(18).putLong(Nbd.INIT_MAGIC).putLong(Nbd.OPTS_MAGIC).putShort((short) handshakeFlags)
                .flip();
    }

    /** The answer to NBD_OPT_EXPORT_NAME, which has no reply header. */
    public static ByteBuffer exportNameReply(long size, int transmissionFlags, boolean noZeroes) {
        ByteBuffer b = ByteBuffer.allocate(10 + (noZeroes ? 0 : 124));
        b.putLong(size).putShort((short) transmissionFlags);
        return b.position(b.capacity()).flip();
    }

    public static ByteBuffer reply(int option, int replyType, ByteBuffer data) {
        ByteBuffer b = ByteBuffer.allocate(20 + data.remaining());
        b.putLong(Nbd.OPTION_REPLY_MAGIC).putInt(option).putInt(replyType).putInt(data.remaining()).put(data);
        return b.flip();
    }

    public static ByteBuffer ack(int option) {
        return reply(option, Nbd.REP_ACK, ByteBuffer.allocate(0));
    }

    /** An NBD_REP_ERR_* reply; the message is for a human and is cut to the spec's string limit. */
    public static ByteBuffer error(int option, int errorType, String message) {
        return reply(option, errorType, ByteBuffer.wrap(utf8(message)));
    }

    public static ByteBuffer server(String name, String description) {
        byte[] n = utf8(name);
        byte[] d = utf8(description == null ? "" : description);
        return ByteBuffer.allocate(4 + n.length + d.length).putInt(n.length).put(n).put(d).flip();
    }

    public static ByteBuffer infoExport(long size, int transmissionFlags) {
        return ByteBuffer.allocate(12).putShort((short) Nbd.INFO_EXPORT).putLong(size)
                .putShort((short) transmissionFlags).flip();
    }

    public static ByteBuffer infoName(String name) {
        byte[] n = utf8(name);
        return ByteBuffer.allocate(2 + n.length).putShort((short) Nbd.INFO_NAME).put(n).flip();
    }

    public static ByteBuffer infoDescription(String description) {
        byte[] d = utf8(description);
        return ByteBuffer.allocate(2 + d.length).putShort((short) Nbd.INFO_DESCRIPTION).put(d).flip();
    }

    public static ByteBuffer infoBlockSize(int minimum, int preferred, int maximum) {
        return ByteBuffer.allocate(14).putShort((short) Nbd.INFO_BLOCK_SIZE).putInt(minimum).putInt(preferred)
                .putInt(maximum).flip();
    }

    public static ByteBuffer metaContext(int id, String name) {
        byte[] n = utf8(name);
        return ByteBuffer.allocate(4 + n.length).putInt(id).put(n).flip();
    }

    static byte[] utf8(String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        if (b.length <= Nbd.MAX_STRING_LENGTH) {
            return b;
        }
        // Cut on a character boundary so the result stays valid UTF-8.
        int end = Nbd.MAX_STRING_LENGTH;
        while (end > 0 && (b[end] & 0xC0) == 0x80) {
            end--;
        }
        return java.util.Arrays.copyOf(b, end);
    }
}
