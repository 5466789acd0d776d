package dev.rbridge.nbd.protocol;

import java.nio.ByteBuffer;

/**
 * Encodes transmission-phase replies into a caller's buffer (relative puts). Payload bytes of READ replies are not
 * copied here: the caller writes the header and then the data buffer with one gathering write.
 */
public final class ReplyEncoder {
    private ReplyEncoder() {}

    public static void simpleReply(ByteBuffer dst, long handle, int error) {
        dst.putInt(Nbd.SIMPLE_REPLY_MAGIC).putInt(error).putLong(handle);
    }

    public static void chunkHeader(ByteBuffer dst, int flags, int type, long handle, int length) {
        dst.putInt(Nbd.STRUCTURED_REPLY_MAGIC).putShort((short) flags).putShort((short) type).putLong(handle)
                .putInt(length);
    }

    /** Header of an OFFSET_DATA chunk (including its offset field); {@code dataLength} bytes of data follow. */
    public static void offsetDataHeader(ByteBuffer dst, int flags, long handle, long offset, int dataLength) {
        chunkHeader(dst, flags, Nbd.REPLY_TYPE_OFFSET_DATA, handle, 8 + dataLength);
        dst.putLong(offset);
    }

    public static int offsetDataHeaderLength() {
        return Nbd.STRUCTURED_REPLY_HEADER_LENGTH + 8;
    }

    public static void offsetHole(ByteBuffer dst, int flags, long handle, long offset, int holeLength) {
        chunkHeader(dst, flags, Nbd.REPLY_TYPE_OFFSET_HOLE, handle, 12);
        dst.putLong(offset).putInt(holeLength);
    }

    public static void none(ByteBuffer dst, long handle) {
        chunkHeader(dst, Nbd.REPLY_FLAG_DONE, Nbd.REPLY_TYPE_NONE, handle, 0);
    }

    public static int errorChunkLength(byte[] message) {
        return Nbd.STRUCTURED_REPLY_HEADER_LENGTH + 6 + message.length;
    }

    /** A final NBD_REPLY_TYPE_ERROR chunk; {@code message} must be at most 65535 bytes of UTF-8. */
    public static void errorChunk(ByteBuffer dst, long handle, int error, byte[] message) {
        chunkHeader(dst, Nbd.REPLY_FLAG_DONE, Nbd.REPLY_TYPE_ERROR, handle, 6 + message.length);
        dst.putInt(error).putShort((short) message.length).put(message);
    }

    public static int blockStatusLength(int extents) {
        return Nbd.STRUCTURED_REPLY_HEADER_LENGTH + 4 + 8 * extents;
    }

    /** A BLOCK_STATUS chunk: {@code lengths[i]}/{@code states[i]} for i below {@code count}. */
    public static void blockStatus(ByteBuffer dst, int flags, long handle, int contextId, int[] lengths, int[] states,
            int count) {
        chunkHeader(dst, flags, Nbd.REPLY_TYPE_BLOCK_STATUS, handle, 4 + 8 * count);
        dst.putInt(contextId);
        for (int i = 0; i < count; i++) {
            dst.putInt(lengths[i]).putInt(states[i]);
        }
    }

    /** An error message for a reply chunk: UTF-8, cut to the spec's string limit. */
    public static byte[] message(String text) {
        return HandshakeEncoder.utf8(text);
    }
}
