package dev.rbridge.kmod.attach;

import static dev.rbridge.fuzz.Feeds.check;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.List;

import org.junit.jupiter.api.Tag;

import com.code_intelligence.jazzer.junit.FuzzTest;

/**
 * The netlink attribute parser against any bytes a netlink socket can deliver: it never throws; every attribute's
 * payload lies inside the bytes given, in order, none overlapping; parsing stops only at an attribute that is
 * truncated or too short for its own header; the attributes re-encode ({@link NetlinkAttributes#put}) to the bytes
 * they came from but for the flag bits of the type and the padding; nested attributes obey the same at every level.
 * The accessors the kernel's replies are read with ({@code u8}, {@code u16}, {@code u32}, {@code u64}, {@code string})
 * return a value or throw {@link IOException}, the error the callers already report, never another exception.
 */
@Tag("fuzz")
class NetlinkAttributesFuzzTest {
    private static final int MAX_DEPTH = 8;

    @FuzzTest(maxDuration = "10s")
    void parse(byte[] bytes) {
        walk(ByteBuffer.wrap(bytes), 0);
    }

    private static void walk(ByteBuffer given, int depth) {
        int from = given.position();
        List<NetlinkAttributes.Attribute> attrs = NetlinkAttributes.parse(given);
        check(given.position() == from, "parse moved the caller's buffer");
        ByteBuffer b = given.duplicate().order(ByteOrder.nativeOrder());
        byte[] all = bytesOf(b);
        NetlinkAttributes again = new NetlinkAttributes();
        int at = from;
        for (NetlinkAttributes.Attribute a : attrs) {
            int start = at;
            int len = Short.toUnsignedInt(b.getShort(at));
            check(len >= 4 && at + len <= b.limit(),
                    () -> "an attribute of " + len + " bytes at " + start + " was returned");
            check(a.type() == (Short.toUnsignedInt(b.getShort(at + 2)) & 0x3fff), "attribute type differs");
            check(a.payload().remaining() == len - 4,
                    () -> "payload of " + a.payload().remaining() + " for length " + len);
            byte[] payload = new byte[len - 4];
            a.payload().duplicate().get(payload);
            check(Arrays.equals(payload, 0, payload.length, all, at + 4, at + len),
                    "payload is not the bytes after the header");
            again.put(a.type(), payload);
            accessors(a);
            if (depth < MAX_DEPTH) {
                walk(a.payload().duplicate(), depth + 1);
            }
            at = Math.min(b.limit(), at + ((len + 3) & ~3));
        }
        int end = at;
        // Where parsing stopped, what is left is not a whole attribute.
        if (b.limit() - end >= 4) {
            int len = Short.toUnsignedInt(b.getShort(end));
            check(len < 4 || end + len > b.limit(), () -> "parsing stopped before a whole attribute at " + end);
        }
        byte[] encoded = again.bytes();
        byte[] sent = Arrays.copyOfRange(all, from, Math.min(b.limit(), from + encoded.length));
        for (int i = 0; i < sent.length; i++) {
            if (encoded[i] != sent[i]) {
                int pos = i;
                check(isFlagOrPadding(b, from, end, from + i, attrs), () -> "re-encoding differs at byte " + pos);
            }
        }
        check(encoded.length - (end - from) >= 0 && encoded.length - (end - from) < 4,
                () -> "re-encoded " + encoded.length + " bytes for " + (end - from));
    }

    private static byte[] bytesOf(ByteBuffer b) {
        byte[] all = new byte[b.limit()];
        b.duplicate().position(0).get(all);
        return all;
    }

    /** Whether {@code pos} is the high byte of an attribute's type (the flag bits) or padding after a payload. */
    private static boolean isFlagOrPadding(ByteBuffer b, int from, int end, int pos,
            List<NetlinkAttributes.Attribute> attrs) {
        int at = from;
        for (int i = 0; i < attrs.size() && at < end; i++) {
            int len = Short.toUnsignedInt(b.getShort(at));
            int padded = (len + 3) & ~3;
            int typeHigh = b.order() == ByteOrder.LITTLE_ENDIAN ? at + 3 : at + 2;
            if (pos == typeHigh || (pos >= at + len && pos < at + padded)) {
                return true;
            }
            at += padded;
        }
        return false;
    }

    private static void accessors(NetlinkAttributes.Attribute a) {
        int n = a.payload().remaining();
        accessor(() -> a.u8(), n, 1);
        accessor(() -> a.u16(), n, 2);
        accessor(() -> a.u32(), n, 4);
        accessor(() -> a.u64(), n, 8);
        String s = a.string();
        check(s != null, "string() returned null");
    }

    private interface Read {
        Object get() throws IOException;
    }

    private static void accessor(Read read, int payload, int width) {
        try {
            read.get();
            check(payload >= width, () -> "a " + width + "-byte value read from " + payload + " bytes");
        } catch (IOException e) {
            check(payload < width && e.getMessage() != null, () -> "refused a " + width + "-byte value from " + payload
                    + " bytes: " + e.getMessage());
        }
    }
}
