package dev.rbridge.cli.adversarial;

import dev.rbridge.nbd.protocol.Nbd;

import java.io.Closeable;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/**
 * A raw NBD client that does what real clients never do: pipelines requests and never reads the replies, declares
 * WRITE payloads it never sends, stops halfway through a handshake. It may connect from another loopback address
 * (127.0.0.2, ...) to play a different peer. Reads it does make have a timeout, so a test never hangs on it.
 */
public final class HostileNbdClient implements Closeable {
    private final Socket socket;
    private final OutputStream out;
    private final DataInputStream in;
    private long nextHandle = 1;

    private HostileNbdClient(Socket socket) throws IOException {
        this.socket = socket;
        this.out = socket.getOutputStream();
        this.in = new DataInputStream(socket.getInputStream());
    }

    /** A TCP connection that has done nothing yet; {@code from} is the local address to bind (null: any). */
    public static HostileNbdClient connect(String host, int port, String from) throws IOException {
        Socket s = new Socket();
        if (from != null) {
            s.bind(new InetSocketAddress(InetAddress.getByName(from), 0));
        }
        s.connect(new InetSocketAddress(host, port), 5_000);
        s.setSoTimeout(10_000);
        s.setTcpNoDelay(true);
        return new HostileNbdClient(s);
    }

    /** Connects and negotiates {@code export} with NBD_OPT_EXPORT_NAME; returns ready for transmission. */
    public static HostileNbdClient inTransmission(String host, int port, String from, String export)
            throws IOException {
        HostileNbdClient c = connect(host, port, from);
        try {
            c.handshake(export);
        } catch (IOException | RuntimeException e) {
            c.close();
            throw e;
        }
        return c;
    }

    /** Reads the greeting and enters transmission with NBD_OPT_EXPORT_NAME (no zero padding). */
    public void handshake(String export) throws IOException {
        readGreeting();
        byte[] name = export.getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate(4 + 16 + name.length);
        b.putInt(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        b.putLong(Nbd.OPTS_MAGIC).putInt(Nbd.OPT_EXPORT_NAME).putInt(name.length).put(name);
        out.write(b.array());
        out.flush();
        long size = in.readLong();
        in.readUnsignedShort();
        if (size <= 0) {
            throw new IOException("export size " + size);
        }
    }

    /** Sends the client flags and NBD_OPT_EXPORT_NAME for {@code export}, and reads nothing. */
    public void exportName(String export) throws IOException {
        byte[] name = export.getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate(4 + 16 + name.length);
        b.putInt(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        b.putLong(Nbd.OPTS_MAGIC).putInt(Nbd.OPT_EXPORT_NAME).putInt(name.length).put(name);
        out.write(b.array());
        out.flush();
    }

    /** Reads the server's greeting (and nothing more): the connection is then mid-handshake. */
    public void readGreeting() throws IOException {
        byte[] greeting = new byte[18];
        in.readFully(greeting);
    }

    /** Sends a READ request; the reply is left unread. */
    public void read(long offset, int length) throws IOException {
        out.write(header(Nbd.CMD_READ, offset, length).array());
    }

    /** Sends READ requests of consecutive ranges back to back in one write, as one burst. */
    public void readBurst(int count, long offset, int length) throws IOException {
        readBurst(count, offset, length, length);
    }

    /** Sends READ requests back to back in one write; request i reads at {@code offset + i * stride}. */
    public void readBurst(int count, long offset, int length, long stride) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(count * Nbd.REQUEST_HEADER_LENGTH);
        for (int i = 0; i < count; i++) {
            b.put(header(Nbd.CMD_READ, offset + i * stride, length).flip());
        }
        out.write(b.array());
        out.flush();
    }

    /** Sends a WRITE header declaring {@code length} payload bytes and then only {@code sent} of them. */
    public void partialWrite(long offset, int length, int sent) throws IOException {
        out.write(header(Nbd.CMD_WRITE, offset, length).array());
        out.write(new byte[sent]);
        out.flush();
    }

    /** Raw bytes, e.g. the first half of a request header. */
    public void send(byte[] bytes) throws IOException {
        out.write(bytes);
        out.flush();
    }

    private ByteBuffer header(int type, long offset, int length) {
        ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_HEADER_LENGTH);
        b.putInt(Nbd.REQUEST_MAGIC).putShort((short) 0).putShort((short) type).putLong(nextHandle++)
                .putLong(offset).putInt(length);
        return b;
    }

    /** True when the server has closed this connection (EOF or reset seen within {@code millis}). */
    public boolean closedByServer(int millis) throws IOException {
        socket.setSoTimeout(millis);
        try {
            byte[] sink = new byte[1 << 16];
            while (true) {
                if (in.read(sink) < 0) {
                    return true;
                }
            }
        } catch (SocketTimeoutException e) {
            return false;
        } catch (SocketException e) {
            return true; // reset
        }
    }

    public Socket socket() {
        return socket;
    }

    @Override
    public void close() {
        try {
            socket.close();
        } catch (IOException ignored) {
            // closing a socket the server may already have reset; nothing to report
        }
    }
}
