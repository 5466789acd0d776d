package dev.rbridge.kmod.attach;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/** Netlink attributes ({@code struct nlattr}: u16 length, u16 type, payload padded to 4 bytes), built and parsed. */
final class NetlinkAttributes {
    private static final int NLA_TYPE_MASK = 0x3fff; // without NLA_F_NESTED and NLA_F_NET_BYTEORDER

    private ByteBuffer buf = ByteBuffer.allocate(256).order(ByteOrder.nativeOrder());

    NetlinkAttributes u32(int type, int value) {
        return put(type, ByteBuffer.allocate(4).order(ByteOrder.nativeOrder()).putInt(value).array());
    }

    NetlinkAttributes u64(int type, long value) {
        return put(type, ByteBuffer.allocate(8).order(ByteOrder.nativeOrder()).putLong(value).array());
    }

    NetlinkAttributes string(int type, String value) {
        byte[] s = value.getBytes(StandardCharsets.UTF_8);
        byte[] z = new byte[s.length + 1]; // NUL-terminated
        System.arraycopy(s, 0, z, 0, s.length);
        return put(type, z);
    }

    NetlinkAttributes nested(int type, NetlinkAttributes inner) {
        return put(type, inner.bytes());
    }

    NetlinkAttributes put(int type, byte[] payload) {
        int len = 4 + payload.length;
        int padded = (len + 3) & ~3;
        ensure(padded);
        buf.putShort((short) len).putShort((short) type).put(payload);
        for (int i = len; i < padded; i++) {
            buf.put((byte) 0);
        }
        return this;
    }

    byte[] bytes() {
        byte[] out = new byte[buf.position()];
        buf.duplicate().flip().get(out);
        return out;
    }

    private void ensure(int n) {
        if (buf.remaining() < n) {
            ByteBuffer bigger = ByteBuffer.allocate(Math.max(buf.capacity() * 2, buf.position() + n))
                    .order(ByteOrder.nativeOrder());
            bigger.put(buf.flip());
            buf = bigger;
        }
    }

    /**
     * One parsed attribute: its type and a little-endian view of its payload. A number read from a payload too short
     * for it is an {@link IOException}, as any other malformed reply is.
     */
    record Attribute(int type, ByteBuffer payload) {
        int u32() throws IOException {
            return payload.getInt(need(4));
        }

        long u64() throws IOException {
            return payload.getLong(need(8));
        }

        int u16() throws IOException {
            return Short.toUnsignedInt(payload.getShort(need(2)));
        }

        int u8() throws IOException {
            return Byte.toUnsignedInt(payload.get(need(1)));
        }

        private int need(int bytes) throws IOException {
            if (payload.remaining() < bytes) {
                throw new IOException("netlink attribute " + type + " has " + payload.remaining() + " bytes, not the "
                        + bytes + " of its value");
            }
            return payload.position();
        }

        String string() {
            ByteBuffer b = payload.duplicate();
            int end = b.limit();
            for (int i = b.position(); i < b.limit(); i++) {
                if (b.get(i) == 0) {
                    end = i;
                    break;
                }
            }
            b.limit(end);
            return StandardCharsets.UTF_8.decode(b).toString();
        }

        List<Attribute> nested() {
            return parse(payload.duplicate().order(ByteOrder.nativeOrder()));
        }
    }

    /** Every attribute from the buffer's position to its limit; a truncated one ends the list. */
    static List<Attribute> parse(ByteBuffer b) {
        List<Attribute> out = new ArrayList<>();
        b = b.duplicate().order(ByteOrder.nativeOrder());
        while (b.remaining() >= 4) {
            int start = b.position();
            int len = Short.toUnsignedInt(b.getShort());
            int type = Short.toUnsignedInt(b.getShort()) & NLA_TYPE_MASK;
            if (len < 4 || start + len > b.limit()) {
                break;
            }
            ByteBuffer payload = b.duplicate().order(ByteOrder.nativeOrder()).position(start + 4).limit(start + len)
                    .slice().order(ByteOrder.nativeOrder());
            out.add(new Attribute(type, payload));
            b.position(Math.min(b.limit(), start + ((len + 3) & ~3)));
        }
        return out;
    }

    static Attribute find(List<Attribute> attrs, int type) {
        for (Attribute a : attrs) {
            if (a.type() == type) {
                return a;
            }
        }
        return null;
    }
}
