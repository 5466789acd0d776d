package dev.rbridge.nbd.server;

import dev.rbridge.nbd.protocol.Nbd;

import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/**
 * A byte-level NBD client for tests that must send what real clients refuse to send (garbage, bad lengths, resets).
 * Every read has a timeout so a server bug shows up as a failed test, never as a hung build.
 */
final class RawClient implements Closeable {
    final Socket socket;
    final DataInputStream in;
    final DataOutputStream out;
    boolean structured;

    record OptionReply(int option, int type, byte[] data) {
        boolean isError() {
            return type < 0;
        }
    }

    record SimpleReply(int error, long handle, byte[] data) {
    }

    record Chunk(int flags, int type, long handle, byte[] payload) {
        boolean done() {
            return (flags & Nbd.REPLY_FLAG_DONE) != 0;
        }

        int errorCode() {
            return ByteBuffer.wrap(payload).getInt();
        }

        String errorMessage() {
            ByteBuffer b = ByteBuffer.wrap(payload);
            b.getInt();
            int n = Short.toUnsignedInt(b.getShort());
            return new String(payload, 6, n, StandardCharsets.UTF_8);
        }
    }

    record ExportInfo(long size, int flags) {
    }

    RawClient(InetSocketAddress address) throws IOException {
        this(address, null);
    }

    /** Connects from {@code from} (a local address such as 127.0.0.2, to play another peer), or any when null. */
    RawClient(InetSocketAddress address, String from) throws IOException {
        socket = new Socket();
        if (from != null) {
            socket.bind(new InetSocketAddress(from, 0));
        }
        socket.connect(address, 5000);
        socket.setSoTimeout(10_000);
        socket.setTcpNoDelay(true);
        in = new DataInputStream(new BufferedInputStream(socket.getInputStream(), 1 << 16));
        out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream(), 1 << 16));
    }

    /** Over a connected socket (TLS over this client's, after {@link #startTls}). */
    private RawClient(Socket connected) throws IOException {
        socket = connected;
        in = new DataInputStream(new BufferedInputStream(socket.getInputStream(), 1 << 16));
        out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream(), 1 << 16));
    }

    /**
     * NBD_OPT_STARTTLS, then a TLS handshake as a client of {@code context} (checking the server as localhost); the
     * returned client speaks through TLS. IOException when the option or the handshake is refused.
     */
    RawClient startTls(javax.net.ssl.SSLContext context) throws IOException {
        OptionReply r = option(Nbd.OPT_STARTTLS, new byte[0]);
        if (r.type() != Nbd.REP_ACK) {
            throw new IOException("STARTTLS refused with reply type 0x" + Integer.toHexString(r.type()) + ": "
                    + new String(r.data(), StandardCharsets.UTF_8));
        }
        javax.net.ssl.SSLSocket tls = (javax.net.ssl.SSLSocket) context.getSocketFactory().createSocket(socket,
                "localhost", socket.getPort(), true);
        javax.net.ssl.SSLParameters p = tls.getSSLParameters();
        p.setEndpointIdentificationAlgorithm("HTTPS");
        tls.setSSLParameters(p);
        tls.startHandshake();
        return new RawClient(tls);
    }

    static RawClient connect(NbdServer server) throws IOException {
        return connectFrom(server, null);
    }

    static RawClient connectFrom(NbdServer server, String from) throws IOException {
        ListenAddress.Tcp tcp = (ListenAddress.Tcp) server.addresses().stream()
                .filter(a -> a instanceof ListenAddress.Tcp).findFirst().orElseThrow();
        return new RawClient(new InetSocketAddress(tcp.host(), tcp.port()), from);
    }

    /** Reads the greeting and sends fixed-newstyle + no-zeroes client flags. */
    RawClient hello() throws IOException {
        long magic = in.readLong();
        long opts = in.readLong();
        int flags = in.readUnsignedShort();
        if (magic != Nbd.INIT_MAGIC || opts != Nbd.OPTS_MAGIC || (flags & Nbd.FLAG_FIXED_NEWSTYLE) == 0) {
            throw new IOException("bad greeting");
        }
        out.writeInt(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        out.flush();
        return this;
    }

    void sendOption(int option, byte[] data) throws IOException {
        out.writeLong(Nbd.OPTS_MAGIC);
        out.writeInt(option);
        out.writeInt(data.length);
        out.write(data);
        out.flush();
    }

    OptionReply readOptionReply() throws IOException {
        long magic = in.readLong();
        if (magic != Nbd.OPTION_REPLY_MAGIC) {
            throw new IOException("bad option reply magic " + Long.toHexString(magic));
        }
        int option = in.readInt();
        int type = in.readInt();
        byte[] data = new byte[in.readInt()];
        in.readFully(data);
        return new OptionReply(option, type, data);
    }

    /** Sends an option and returns its final reply (skipping REP_INFO / REP_SERVER / REP_META_CONTEXT). */
    OptionReply option(int option, byte[] data) throws IOException {
        sendOption(option, data);
        while (true) {
            OptionReply r = readOptionReply();
            if (r.type() == Nbd.REP_ACK || r.isError()) {
                return r;
            }
        }
    }

    static byte[] infoData(String name, int... requests) {
        byte[] n = name.getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate(4 + n.length + 2 + 2 * requests.length);
        b.putInt(n.length).put(n).putShort((short) requests.length);
        for (int r : requests) {
            b.putShort((short) r);
        }
        return b.array();
    }

    static byte[] metaData(String name, String... queries) {
        byte[] n = name.getBytes(StandardCharsets.UTF_8);
        int len = 4 + n.length + 4;
        for (String q : queries) {
            len += 4 + q.getBytes(StandardCharsets.UTF_8).length;
        }
        ByteBuffer b = ByteBuffer.allocate(len).putInt(n.length).put(n).putInt(queries.length);
        for (String q : queries) {
            byte[] qb = q.getBytes(StandardCharsets.UTF_8);
            b.putInt(qb.length).put(qb);
        }
        return b.array();
    }

    /** Full handshake ending with NBD_OPT_GO; optionally structured replies and base:allocation first. */
    ExportInfo go(String export, boolean structuredReplies, boolean baseAllocation) throws IOException {
        hello();
        return negotiate(export, structuredReplies, baseAllocation);
    }

    /** As {@link #go} after the greeting (and after STARTTLS). */
    ExportInfo negotiate(String export, boolean structuredReplies, boolean baseAllocation) throws IOException {
        if (structuredReplies) {
            OptionReply r = option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]);
            if (r.type() != Nbd.REP_ACK) {
                throw new IOException("structured replies refused");
            }
            structured = true;
            if (baseAllocation) {
                option(Nbd.OPT_SET_META_CONTEXT, metaData(export, Nbd.CONTEXT_BASE_ALLOCATION));
            }
        }
        sendOption(Nbd.OPT_GO, infoData(export));
        ExportInfo info = null;
        while (true) {
            OptionReply r = readOptionReply();
            if (r.type() == Nbd.REP_INFO) {
                ByteBuffer b = ByteBuffer.wrap(r.data());
                if (b.getShort() == Nbd.INFO_EXPORT) {
                    info = new ExportInfo(b.getLong(), Short.toUnsignedInt(b.getShort()));
                }
            } else if (r.type() == Nbd.REP_ACK) {
                return info;
            } else {
                throw new IOException("GO failed with reply type 0x" + Integer.toHexString(r.type()) + ": "
                        + new String(r.data(), StandardCharsets.UTF_8));
            }
        }
    }

    void request(int flags, int type, long handle, long offset, long length, byte[] payload) throws IOException {
        out.writeInt(Nbd.REQUEST_MAGIC);
        out.writeShort(flags);
        out.writeShort(type);
        out.writeLong(handle);
        out.writeLong(offset);
        out.writeInt((int) length);
        if (payload != null) {
            out.write(payload);
        }
    }

    void flush() throws IOException {
        out.flush();
    }

    SimpleReply readSimple(int dataLength) throws IOException {
        return readSimple(h -> dataLength);
    }

    /** A simple reply whose data length depends on which request (handle) it answers. */
    SimpleReply readSimple(java.util.function.LongToIntFunction dataLengthForHandle) throws IOException {
        int magic = in.readInt();
        if (magic != Nbd.SIMPLE_REPLY_MAGIC) {
            throw new IOException("expected a simple reply, got magic " + Integer.toHexString(magic));
        }
        int error = in.readInt();
        long handle = in.readLong();
        byte[] data = new byte[error == 0 ? dataLengthForHandle.applyAsInt(handle) : 0];
        in.readFully(data);
        return new SimpleReply(error, handle, data);
    }

    Chunk readChunk() throws IOException {
        int magic = in.readInt();
        if (magic != Nbd.STRUCTURED_REPLY_MAGIC) {
            throw new IOException("expected a structured chunk, got magic " + Integer.toHexString(magic));
        }
        int flags = in.readUnsignedShort();
        int type = in.readUnsignedShort();
        long handle = in.readLong();
        byte[] payload = new byte[in.readInt()];
        in.readFully(payload);
        return new Chunk(flags, type, handle, payload);
    }

    /** True when the server closed the connection (EOF or reset) within the socket timeout. */
    boolean closedByServer() throws IOException {
        try {
            while (in.read() >= 0) {
                // drain whatever was in flight
            }
            return true;
        } catch (SocketTimeoutException e) {
            return false;
        } catch (EOFException e) {
            return true;
        } catch (IOException e) {
            return e.getMessage() != null && e.getMessage().contains("reset");
        }
    }

    /** As {@link #closedByServer()}, waiting at most {@code millis}. */
    boolean closedByServer(int millis) throws IOException {
        int before = socket.getSoTimeout();
        socket.setSoTimeout(millis);
        try {
            return closedByServer();
        } finally {
            if (!socket.isClosed()) {
                socket.setSoTimeout(before);
            }
        }
    }

    /** Closes with an RST instead of a FIN: what a crashed or killed client looks like. */
    void reset() throws IOException {
        socket.setSoLinger(true, 0);
        socket.close();
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
