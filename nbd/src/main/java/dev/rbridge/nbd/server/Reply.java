package dev.rbridge.nbd.server;

import dev.rbridge.common.splice.Pipe;
import dev.rbridge.nbd.protocol.Nbd;
import dev.rbridge.nbd.protocol.ReplyEncoder;

import java.nio.ByteBuffer;

/**
 * A reply waiting to be written: a header the {@link Outbox} encodes into its own direct buffer, and optionally a
 * payload buffer from the {@link BufferPool} that is written as is and released afterwards, which a spliced READ's
 * pipe precedes.
 */
sealed interface Reply {
    int headerLength();

    void encodeHeader(ByteBuffer dst);

    default ByteBuffer payload() {
        return null;
    }

    /** Data written before {@link #payload()}, from a pipe with {@code splice(2)}; or null. */
    default Pipe pipe() {
        return null;
    }

    /** A simple reply, with read data when {@code data} is non-null (and the error is zero). */
    record Simple(long handle, int error, ByteBuffer data) implements Reply {
        public int headerLength() {
            return Nbd.SIMPLE_REPLY_HEADER_LENGTH;
        }

        public void encodeHeader(ByteBuffer dst) {
            ReplyEncoder.simpleReply(dst, handle, error);
        }

        public ByteBuffer payload() {
            return data;
        }
    }

    /** The whole successful structured reply to a READ: one OFFSET_DATA chunk marked done. */
    record ReadData(long handle, long offset, ByteBuffer data) implements Reply {
        public int headerLength() {
            return ReplyEncoder.offsetDataHeaderLength();
        }

        public void encodeHeader(ByteBuffer dst) {
            ReplyEncoder.offsetDataHeader(dst, Nbd.REPLY_FLAG_DONE, handle, offset, data.remaining());
        }

        public ByteBuffer payload() {
            return data;
        }
    }

    /**
     * The successful reply to a READ whose data the device spliced: the first bytes in {@code pipe}, the rest in
     * {@code rest} from its position to its limit (the READ's pooled buffer, nothing left when all were piped).
     * Simple or a structured OFFSET_DATA chunk marked done, as the connection negotiated.
     */
    record PipedRead(long handle, long offset, boolean structured, Pipe pipe, ByteBuffer rest, int length)
            implements Reply {
        public int headerLength() {
            return structured ? ReplyEncoder.offsetDataHeaderLength() : Nbd.SIMPLE_REPLY_HEADER_LENGTH;
        }

        public void encodeHeader(ByteBuffer dst) {
            if (structured) {
                ReplyEncoder.offsetDataHeader(dst, Nbd.REPLY_FLAG_DONE, handle, offset, length);
            } else {
                ReplyEncoder.simpleReply(dst, handle, 0);
            }
        }

        public ByteBuffer payload() {
            return rest;
        }
    }

    /** A structured reply with no content: the NONE chunk (a zero-length READ). */
    record Done(long handle) implements Reply {
        public int headerLength() {
            return Nbd.STRUCTURED_REPLY_HEADER_LENGTH;
        }

        public void encodeHeader(ByteBuffer dst) {
            ReplyEncoder.none(dst, handle);
        }
    }

    /** A final ERROR chunk with a message for the human at the client. */
    record Error(long handle, int error, byte[] message) implements Reply {
        public int headerLength() {
            return ReplyEncoder.errorChunkLength(message);
        }

        public void encodeHeader(ByteBuffer dst) {
            ReplyEncoder.errorChunk(dst, handle, error, message);
        }
    }

    /** A final BLOCK_STATUS chunk for one metadata context. */
    record BlockStatus(long handle, int contextId, int[] lengths, int[] states, int count) implements Reply {
        public int headerLength() {
            return ReplyEncoder.blockStatusLength(count);
        }

        public void encodeHeader(ByteBuffer dst) {
            ReplyEncoder.blockStatus(dst, Nbd.REPLY_FLAG_DONE, handle, contextId, lengths, states, count);
        }
    }
}
