package dev.rbridge.kmod.attach;

import dev.rbridge.nbd.protocol.Nbd;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/**
 * The client side of the NBD fixed-newstyle handshake, just what the kernel needs before it takes a socket over:
 * {@code NBD_OPT_GO} for one export, asking for its block sizes. Structured replies are not negotiated, because the
 * kernel driver understands simple replies only.
 */
final class NbdClientHandshake {
    /** What the server said about the export. Block sizes are 0 when the server sent none. */
    record ExportInfo(long size, int flags, int minimumBlock, int preferredBlock, int maximumPayload) {
        boolean readOnly() {
            return (flags & Nbd.FLAG_READ_ONLY) != 0;
        }

        boolean multiConn() {
            return (flags & (1 << 8)) != 0; // NBD_FLAG_CAN_MULTI_CONN
        }
    }

    private NbdClientHandshake() {}

    static ExportInfo go(NativeSocket s, String export) throws IOException {
        return negotiate(s, export, Nbd.OPT_GO);
    }

    /**
     * What the server says about the export now ({@code NBD_OPT_INFO}), then {@code NBD_OPT_ABORT}: the connection
     * never reaches transmission, so asking costs the server no session (how attach notices a volume grown online).
     */
    static ExportInfo info(NativeSocket s, String export) throws IOException {
        ExportInfo info = negotiate(s, export, Nbd.OPT_INFO);
        ByteBuffer abort = ByteBuffer.allocate(16);
        abort.putLong(Nbd.OPTS_MAGIC).putInt(Nbd.OPT_ABORT).putInt(0);
        s.writeAll(abort.flip());
        return info;
    }

    /** One option reply: its type and its body, read whole. */
    private record OptionReply(int type, ByteBuffer body) {
    }

    private static ExportInfo negotiate(NativeSocket s, String export, int optionCode) throws IOException {
        int serverFlags = greeting(s);
        sendOption(s, export, optionCode, Nbd.FLAG_FIXED_NEWSTYLE | (serverFlags & Nbd.FLAG_NO_ZEROES));
        ExportInfo info = new ExportInfo(-1, 0, 0, 0, 0);
        for (OptionReply r = optionReply(s, optionCode); r.type() != Nbd.REP_ACK; r = optionReply(s, optionCode)) {
            if (r.type() < 0) { // the error bit
                String message = StandardCharsets.UTF_8.decode(r.body()).toString();
                throw new IOException(s.peer() + " refused export '" + export + "': " + errorName(r.type())
                        + (message.isEmpty() ? "" : " (" + message + ")"));
            }
            if (r.type() == Nbd.REP_INFO) {
                info = told(info, r.body());
            }
        }
        if (info.size() < 0) {
            throw new IOException(s.peer() + " finished " + (optionCode == Nbd.OPT_GO ? "OPT_GO" : "OPT_INFO")
                    + " for '" + export + "' without saying its size");
        }
        return info;
    }

    /** Reads the server's greeting; returns its handshake flags once it proved a fixed-newstyle server. */
    private static int greeting(NativeSocket s) throws IOException {
        ByteBuffer greeting = ByteBuffer.allocate(18);
        s.readFully(greeting);
        greeting.flip();
        long magic = greeting.getLong();
        long opts = greeting.getLong();
        if (magic != Nbd.INIT_MAGIC || opts != Nbd.OPTS_MAGIC) {
            throw new IOException(s.peer() + " is not a newstyle NBD server (greeting 0x" + Long.toHexString(magic)
                    + " 0x" + Long.toHexString(opts) + ")");
        }
        int serverFlags = Short.toUnsignedInt(greeting.getShort());
        if ((serverFlags & Nbd.FLAG_FIXED_NEWSTYLE) == 0) {
            throw new IOException(s.peer() + " does not speak fixed newstyle NBD");
        }
        return serverFlags;
    }

    /** Sends the client flags and the option for {@code export}, asking for its block sizes. */
    private static void sendOption(NativeSocket s, String export, int optionCode, int clientFlags) throws IOException {
        byte[] name = export.getBytes(StandardCharsets.UTF_8);
        ByteBuffer go = ByteBuffer.allocate(4 + 16 + 4 + name.length + 2 + 2);
        go.putInt(clientFlags);
        go.putLong(Nbd.OPTS_MAGIC).putInt(optionCode).putInt(4 + name.length + 2 + 2);
        go.putInt(name.length).put(name).putShort((short) 1).putShort((short) Nbd.INFO_BLOCK_SIZE);
        s.writeAll(go.flip());
    }

    /** The next reply to option {@code optionCode}, its body (at most 64 KiB) read whole. */
    private static OptionReply optionReply(NativeSocket s, int optionCode) throws IOException {
        ByteBuffer head = ByteBuffer.allocate(20);
        s.readFully(head);
        head.flip();
        long replyMagic = head.getLong();
        int option = head.getInt();
        int type = head.getInt();
        int length = head.getInt();
        if (replyMagic != Nbd.OPTION_REPLY_MAGIC || option != optionCode) {
            throw new IOException(s.peer() + " sent a malformed option reply");
        }
        if (length < 0 || length > 64 << 10) {
            throw new IOException(s.peer() + " sent an option reply of " + Integer.toUnsignedString(length)
                    + " bytes");
        }
        ByteBuffer body = ByteBuffer.allocate(length);
        s.readFully(body);
        return new OptionReply(type, body.flip());
    }

    /**
     * {@code info} with what an {@code NBD_REP_INFO} body tells: the export's size and flags, or its block sizes;
     * a body too short for what it names, or naming something else, tells nothing.
     */
    private static ExportInfo told(ExportInfo info, ByteBuffer body) {
        int length = body.remaining();
        if (length < 2) {
            return info;
        }
        int kind = Short.toUnsignedInt(body.getShort());
        if (kind == Nbd.INFO_EXPORT && length >= 12) {
            return new ExportInfo(body.getLong(), Short.toUnsignedInt(body.getShort()), info.minimumBlock(),
                    info.preferredBlock(), info.maximumPayload());
        }
        if (kind == Nbd.INFO_BLOCK_SIZE && length >= 14) {
            return new ExportInfo(info.size(), info.flags(), body.getInt(), body.getInt(), body.getInt());
        }
        return info;
    }

    private static String errorName(int type) {
        return switch (type) {
            case Nbd.REP_ERR_UNKNOWN -> "no such export";
            case Nbd.REP_ERR_POLICY -> "refused by policy";
            case Nbd.REP_ERR_TLS_REQD -> "TLS required";
            case Nbd.REP_ERR_SHUTDOWN -> "the server is shutting down";
            case Nbd.REP_ERR_BLOCK_SIZE_REQD -> "the server requires block size negotiation";
            case Nbd.REP_ERR_UNSUP -> "OPT_GO not supported";
            default -> "error 0x" + Integer.toHexString(type);
        };
    }
}
