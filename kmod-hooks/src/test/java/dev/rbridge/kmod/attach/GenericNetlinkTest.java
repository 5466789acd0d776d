package dev.rbridge.kmod.attach;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

/**
 * The decoding of what a generic netlink socket receives, without a socket: the replies to a request up to the
 * kernel's acknowledgement, and events. Datagrams are built here as the kernel lays them out (native byte order),
 * including ones no correct kernel sends: a message too short for its own headers, or longer than the datagram,
 * must be an IOException (the error attach reports), never an exception from a buffer.
 */
class GenericNetlinkTest {
    private static final int SEQ = 77;
    private static final int FAMILY = 0x1b;

    /** One netlink message: header (length as given, or the real one when {@code length} is -1), then body. */
    private static byte[] message(int length, int type, int seq, byte[] body) {
        int real = 16 + body.length;
        ByteBuffer b = ByteBuffer.allocate((real + 3) & ~3).order(ByteOrder.nativeOrder());
        b.putInt(length < 0 ? real : length).putShort((short) type).putShort((short) 0).putInt(seq).putInt(0);
        b.put(body);
        return b.array();
    }

    private static byte[] genl(int command, NetlinkAttributes attrs) {
        byte[] a = attrs.bytes();
        ByteBuffer b = ByteBuffer.allocate(4 + a.length).order(ByteOrder.nativeOrder());
        b.put((byte) command).put((byte) 1).putShort((short) 0).put(a);
        return b.array();
    }

    private static byte[] errorCode(int code) {
        // nlmsgerr: the error, then the header of the request it answers (16 bytes)
        return ByteBuffer.allocate(20).order(ByteOrder.nativeOrder()).putInt(code).array();
    }

    private static ByteBuffer datagram(byte[]... messages) {
        int n = 0;
        for (byte[] m : messages) {
            n += m.length;
        }
        ByteBuffer b = ByteBuffer.allocate(n).order(ByteOrder.nativeOrder());
        for (byte[] m : messages) {
            b.put(m);
        }
        return b.flip();
    }

    @Test
    void repliesUpToTheAcknowledgementAreCollectedAndOthersSkipped() throws IOException {
        List<GenericNetlink.Message> replies = new ArrayList<>();
        ByteBuffer first = datagram(
                message(-1, FAMILY, SEQ - 1, genl(9, new NetlinkAttributes().u32(1, 5))), // an earlier request's
                message(-1, FAMILY, SEQ, genl(3, new NetlinkAttributes().u32(1, 42).string(2, "nbd"))));
        assertFalse(GenericNetlink.collect(first, SEQ, replies, "test"));
        assertTrue(GenericNetlink.collect(datagram(message(-1, 2, SEQ, errorCode(0))), SEQ, replies, "test"));
        assertEquals(1, replies.size());
        assertEquals(3, replies.getFirst().command());
        assertEquals(42, NetlinkAttributes.find(replies.getFirst().attributes(), 1).u32());
        assertEquals("nbd", NetlinkAttributes.find(replies.getFirst().attributes(), 2).string());
        assertTrue(GenericNetlink.collect(datagram(message(-1, 3, SEQ, new byte[4])), SEQ, new ArrayList<>(), "t"),
                "DONE ends a dump");
    }

    @Test
    void anErrorTheKernelAnsweredCarriesItsErrno() {
        GenericNetlink.NetlinkException e = assertThrows(GenericNetlink.NetlinkException.class,
                () -> GenericNetlink.collect(datagram(message(-1, 2, SEQ, errorCode(-2))), SEQ, new ArrayList<>(),
                        "look up family x"));
        assertEquals(2, e.errno);
        assertTrue(e.getMessage().startsWith("look up family x"), e.getMessage());
    }

    @Test
    void anErrorMessageWithoutItsCodeIsAnIOException() {
        IOException e = assertThrows(IOException.class, () -> GenericNetlink.collect(
                datagram(message(-1, 2, SEQ, new byte[0])), SEQ, new ArrayList<>(), "test"));
        assertFalse(e instanceof GenericNetlink.NetlinkException, e.toString());
    }

    @Test
    void aGenericMessageShorterThanItsHeaderIsAnIOException() {
        for (int body = 0; body < 4; body++) {
            int n = body;
            byte[] m = message(16 + n, FAMILY, SEQ, new byte[n]);
            // the datagram ends with the short message, as a kernel (or a forged sender) could end it
            ByteBuffer d = datagram(m).limit(16 + n);
            IOException e = assertThrows(IOException.class,
                    () -> GenericNetlink.collect(d, SEQ, new ArrayList<>(), "test"), "body " + n);
            assertTrue(e.getMessage().contains("without its header"), e.getMessage());
        }
    }

    @Test
    void aLengthBeyondTheDatagramIsAnIOExceptionEvenWhereItWouldOverflow() {
        for (int length : new int[]{64, 0x7ffffff0, Integer.MAX_VALUE, -1 >>> 1, 0x80000000, 15}) {
            ByteBuffer b = ByteBuffer.allocate(40).order(ByteOrder.nativeOrder());
            b.putInt(length).putShort((short) FAMILY).putShort((short) 0).putInt(SEQ).putInt(0);
            ByteBuffer d = b.position(0).limit(40);
            IOException e = assertThrows(IOException.class,
                    () -> GenericNetlink.collect(d, SEQ, new ArrayList<>(), "test"), "length " + length);
            assertTrue(e.getMessage().contains("truncated"), e.getMessage());
        }
        // After a first message, start + length overflows an int: still beyond the datagram.
        ByteBuffer d = datagram(message(-1, FAMILY, SEQ - 1, genl(1, new NetlinkAttributes())),
                message(-1, FAMILY, SEQ, new byte[8]));
        d.putInt(20, Integer.MAX_VALUE - 4);
        IOException e = assertThrows(IOException.class, () -> GenericNetlink.collect(d, SEQ, new ArrayList<>(), "t"));
        assertTrue(e.getMessage().contains("truncated"), e.getMessage());
    }

    @Test
    void eventsOfTheFamilyAreFoundAndMalformedOnesIgnored() throws IOException {
        GenericNetlink.Message m = GenericNetlink.event(datagram(
                message(-1, 0x10, 0, genl(1, new NetlinkAttributes())), // another family's
                message(-1, FAMILY, 0, genl(5, new NetlinkAttributes().u32(1, 3)))), FAMILY);
        assertNotNull(m);
        assertEquals(5, m.command());
        assertEquals(3, NetlinkAttributes.find(m.attributes(), 1).u32());
        for (int body = 0; body < 4; body++) {
            ByteBuffer d = datagram(message(16 + body, FAMILY, 0, new byte[body])).limit(16 + body);
            assertNull(GenericNetlink.event(d, FAMILY), "body " + body);
        }
        ByteBuffer huge = ByteBuffer.allocate(24).order(ByteOrder.nativeOrder()).putInt(Integer.MAX_VALUE)
                .putShort((short) FAMILY).position(0);
        assertNull(GenericNetlink.event(huge, FAMILY));
    }
}
