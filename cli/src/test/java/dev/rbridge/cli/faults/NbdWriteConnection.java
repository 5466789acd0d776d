package dev.rbridge.cli.faults;

import dev.rbridge.nbd.protocol.Nbd;

import java.io.BufferedOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;

/**
 * One NBD connection that writes a block and waits for its reply before the next, so that every acknowledged write is
 * known. Fixed newstyle with NBD_OPT_EXPORT_NAME and no structured replies: every reply is a simple reply. Replies
 * are waited for at most {@code replyTimeout}, so a writer behind a bridge that never wakes fails instead of hanging;
 * {@link #close()} from another thread also ends a write blocked on a full socket.
 */
final class NbdWriteConnection implements Closeable {
    /** The NBD error number of EIO. */
    static final int EIO = 5;

    private final Socket socket;
    private final DataInputStream in;
    private final OutputStream out;
    private long handle;

    private NbdWriteConnection(Socket socket) throws IOException {
        this.socket = socket;
        this.in = new DataInputStream(socket.getInputStream());
        this.out = new BufferedOutputStream(socket.getOutputStream(), 64 * 1024);
    }

    /** Connects to {@code nbd://HOST:PORT/EXPORT} and enters transmission. */
    static NbdWriteConnection open(String uri, Duration replyTimeout) throws IOException {
        URI u = URI.create(uri);
        String export = u.getPath().substring(1);
        Socket s = new Socket();
        try {
            s.connect(new InetSocketAddress(u.getHost(), u.getPort()), 5_000);
            s.setSoTimeout((int) replyTimeout.toMillis());
            s.setTcpNoDelay(true);
            NbdWriteConnection c = new NbdWriteConnection(s);
            c.handshake(export);
            return c;
        } catch (IOException | RuntimeException e) {
            s.close();
            throw e;
        }
    }

    private void handshake(String export) throws IOException {
        if (in.readLong() != Nbd.INIT_MAGIC || in.readLong() != Nbd.OPTS_MAGIC) {
            throw new IOException("not a fixed-newstyle NBD server");
        }
        int serverFlags = in.readUnsignedShort();
        if ((serverFlags & Nbd.FLAG_NO_ZEROES) == 0) {
            throw new IOException("the server does not offer NO_ZEROES: flags " + serverFlags);
        }
        byte[] name = export.getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate(4 + 16 + name.length);
        b.putInt(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        b.putLong(Nbd.OPTS_MAGIC).putInt(Nbd.OPT_EXPORT_NAME).putInt(name.length).put(name);
        out.write(b.array());
        out.flush();
        long size = in.readLong(); // an unknown export closes the connection instead: EOFException
        in.readUnsignedShort();
        if (size <= 0) {
            throw new IOException("export " + export + " has size " + size);
        }
    }

    /** Writes {@code data} at {@code offset} and waits for the reply; returns its error number (0: written). */
    int write(long offset, byte[] data) throws IOException {
        long h = ++handle;
        ByteBuffer header = ByteBuffer.allocate(Nbd.REQUEST_HEADER_LENGTH);
        header.putInt(Nbd.REQUEST_MAGIC).putShort((short) 0).putShort((short) Nbd.CMD_WRITE).putLong(h)
                .putLong(offset).putInt(data.length);
        out.write(header.array());
        out.write(data);
        out.flush();
        int magic = in.readInt();
        int error = in.readInt();
        long replyHandle = in.readLong();
        if (magic != Nbd.SIMPLE_REPLY_MAGIC || replyHandle != h) {
            throw new IOException(String.format("bad reply: magic %08x, handle %d for request %d", magic, replyHandle,
                    h));
        }
        return error;
    }

    @Override
    public void close() {
        try {
            socket.close();
        } catch (IOException ignored) {
            // closing a socket the server may already have reset: nothing to report
        }
    }
}
