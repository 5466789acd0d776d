package dev.rbridge.kmod.attach;

import static dev.rbridge.fuzz.Feeds.check;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Tag;

import com.code_intelligence.jazzer.junit.FuzzTest;

/**
 * A generic netlink datagram as the socket receives it (the kernel's reply to a request of sequence number
 * {@value #SEQ}, or an event of family {@value #FAMILY}), decoded as attach decodes it: collecting the replies either
 * returns (with at most one message per 20 bytes, and ending the reply only where a DONE or an acknowledgement of
 * the request was) or throws {@link IOException}, never another exception; the event search returns null or a
 * message of the family, and never throws; a message's attributes never number more than its bytes allow.
 */
@Tag("fuzz")
class GenericNetlinkFuzzTest {
    private static final int SEQ = 77;
    private static final int FAMILY = 0x1b;

    @FuzzTest(maxDuration = "10s")
    void datagram(byte[] bytes) {
        List<GenericNetlink.Message> replies = new ArrayList<>();
        ByteBuffer in = ByteBuffer.wrap(bytes).order(ByteOrder.nativeOrder());
        try {
            boolean ended = GenericNetlink.collect(in, SEQ, replies, "fuzz");
            check(replies.size() <= bytes.length / 20, () -> replies.size() + " messages from " + bytes.length
                    + " bytes");
            check(!ended || endsHere(bytes), "ended the reply without a DONE or an acknowledgement of its request");
        } catch (IOException e) {
            check(e.getMessage() != null && e.getMessage().startsWith("fuzz"), () -> "an error without its context: "
                    + e.getMessage());
        }
        GenericNetlink.Message event = GenericNetlink.event(ByteBuffer.wrap(bytes).order(ByteOrder.nativeOrder()),
                FAMILY);
        if (event != null) {
            check(event.attributes().size() <= bytes.length / 4, () -> event.attributes().size()
                    + " attributes from " + bytes.length + " bytes");
        }
    }

    /** Whether some message header in the bytes is a DONE or an error (acknowledgement) of request SEQ. */
    private static boolean endsHere(byte[] bytes) {
        ByteBuffer b = ByteBuffer.wrap(bytes).order(ByteOrder.nativeOrder());
        for (int at = 0; at + 16 <= bytes.length; at += 4) {
            int type = Short.toUnsignedInt(b.getShort(at + 4));
            if ((type == 2 || type == 3) && b.getInt(at + 8) == SEQ) {
                return true;
            }
        }
        return false;
    }
}
