package dev.rbridge.nbd.server;

import dev.rbridge.nbd.tls.PskServer;
import org.bouncycastle.tls.TlsServerProtocol;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.concurrent.locks.ReentrantLock;

/**
 * TLS-PSK over a connection's socket, with Bouncy Castle's TLS protocol in its non-blocking form: records read from
 * the socket are offered to it, what it has to send is taken from it and written. Its state is not made for two
 * threads at once, so every call into it holds one lock: the reader's (decrypting what came) and the reply writer's
 * (encrypting) take turns, each for one batch at most. What it may hold is bounded: input by the socket reads of
 * {@link #NET_IN} bytes it is offered at a time, output by {@link #MAX_PENDING} bytes, past which a write takes
 * nothing more until the socket has taken them ({@link #pendingOutput}), as a full plain socket would.
 */
final class PskTlsWire implements SecureWire {
    private static final int NET_IN = 32 << 10;
    /** Encrypted bytes held for the socket at most, before writes stop taking replies. */
    private static final int MAX_PENDING = 256 << 10;

    private final SocketChannel channel;
    private final TlsServerProtocol protocol;
    private final PskServer server;
    private final ReentrantLock lock = new ReentrantLock();
    private final ByteBuffer netIn = ByteBuffer.allocate(NET_IN);
    /** Encrypted output taken from the protocol, not yet written (flipped). */
    private final ByteBuffer netOut = ByteBuffer.allocateDirect(64 << 10).flip();
    private final byte[] appOut;
    private volatile boolean pending;

    private PskTlsWire(SocketChannel channel, TlsServerProtocol protocol, PskServer server) {
        this.channel = channel;
        this.protocol = protocol;
        this.server = server;
        this.appOut = new byte[Math.max(1, protocol.getApplicationDataLimit())];
    }

    /** Runs the server side of the handshake on {@code channel} (blocking, as during the NBD handshake). */
    static PskTlsWire handshake(SocketChannel channel, PskServer server) throws IOException {
        TlsServerProtocol protocol = new TlsServerProtocol();
        protocol.accept(server);
        PskTlsWire w = new PskTlsWire(channel, protocol, server);
        while (protocol.isHandshaking()) {
            w.flushBlocking();
            if (!protocol.isHandshaking()) {
                break;
            }
            if (w.offerFromSocket() < 0) {
                throw new EOFException("client closed the connection during the TLS handshake");
            }
        }
        w.flushBlocking();
        return w;
    }

    /** One socket read, offered to the protocol; what it answers goes out if the socket takes it. */
    private int offerFromSocket() throws IOException {
        netIn.clear();
        int n = channel.read(netIn);
        if (n <= 0) {
            return n;
        }
        lock.lock();
        try {
            protocol.offerInput(netIn.array(), 0, n);
            flush();
        } catch (IOException e) {
            try {
                flush(); // the alert that says why, so the client's error is not just "terminated"
            } catch (IOException | RuntimeException ignored) {
                // the client may be gone
            }
            throw e;
        } finally {
            lock.unlock();
        }
        return n;
    }

    @Override
    public boolean bufferedInput() {
        lock.lock();
        try {
            return protocol.getAvailableInputBytes() > 0;
        } finally {
            lock.unlock();
        }
    }

    @Override
    public int read(ByteBuffer dst) throws IOException {
        boolean readSocket = false;
        while (true) {
            lock.lock();
            try {
                if (protocol.getAvailableInputBytes() > 0) {
                    return protocol.readInput(dst, dst.remaining());
                }
                if (protocol.isClosed()) {
                    return -1;
                }
            } finally {
                lock.unlock();
            }
            if (readSocket) {
                return 0;
            }
            readSocket = true;
            int n = offerFromSocket();
            if (n < 0) {
                return -1;
            }
            if (n == 0) {
                return 0;
            }
        }
    }

    @Override
    public long write(ByteBuffer[] srcs, int offset, int length) throws IOException {
        lock.lock();
        try {
            if (!flush()) {
                return 0;
            }
            long taken = 0;
            for (int i = offset; i < offset + length; i++) {
                ByteBuffer src = srcs[i];
                while (src.hasRemaining() && protocol.getAvailableOutputBytes() < MAX_PENDING) {
                    int n = Math.min(src.remaining(), appOut.length);
                    src.get(appOut, 0, n);
                    protocol.writeApplicationData(appOut, 0, n);
                    taken += n;
                }
                if (src.hasRemaining()) {
                    break;
                }
            }
            flush();
            return taken;
        } finally {
            lock.unlock();
        }
    }

    @Override
    public boolean flush() throws IOException {
        lock.lock();
        try {
            while (true) {
                while (netOut.hasRemaining()) {
                    if (channel.write(netOut) == 0) {
                        pending = true;
                        return false;
                    }
                }
                if (protocol.getAvailableOutputBytes() == 0) {
                    pending = false;
                    return true;
                }
                netOut.clear();
                protocol.readOutput(netOut, netOut.remaining());
                netOut.flip();
            }
        } finally {
            lock.unlock();
        }
    }

    private void flushBlocking() throws IOException {
        while (!flush()) {
            Thread.onSpinWait(); // the channel blocks during the handshake: flush only returns false when it is not
        }
    }

    @Override
    public boolean pendingOutput() {
        return pending;
    }

    @Override
    public void closeQuietly() {
        if (!lock.tryLock()) {
            return;
        }
        try {
            protocol.close();
            flush();
        } catch (IOException | RuntimeException e) {
            // closing anyway
        } finally {
            lock.unlock();
        }
    }

    @Override
    public SocketChannel socket() {
        return channel;
    }

    /** For the log: protocol, cipher suite, and who the client proved to be. */
    @Override
    public String describe() {
        return server.protocolVersion() + " PSK, identity '" + server.identity() + "'";
    }
}
