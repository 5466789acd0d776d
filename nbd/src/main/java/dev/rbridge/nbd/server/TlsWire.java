package dev.rbridge.nbd.server;

import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLEngineResult;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLSession;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;

/**
 * TLS over a connection's socket, after NBD_OPT_STARTTLS: one {@link SSLEngine}, records in and out through buffers of
 * this wire's own. Reads (unwrap) belong to the connection's thread, writes (wrap) to whoever writes replies; the
 * engine allows the two at once, and the few records a read must answer (a TLS 1.3 key update, a close) are written
 * under the same lock as replies. Nothing blocks that would not block on the plain socket: a write that cannot send
 * its records keeps them ({@link #pendingOutput}) until {@link #flush} can.
 *
 * <p>Memory is bounded per connection: {@link #IN_RECORDS} records and one record's plaintext for input, and
 * {@link #OUT_RECORDS} records for output. A read with room for a whole record's plaintext (a large WRITE's payload
 * buffer) is decrypted straight into it, not through this wire's own buffer.
 */
final class TlsWire implements SecureWire {
    /** Records wrapped per socket write: replies of a batch leave in a few system calls, not one per 16 KiB. */
    private static final int OUT_RECORDS = 8;
    /** Records a socket read may bring at once: a large WRITE's payload comes in a few system calls too. */
    private static final int IN_RECORDS = 4;

    private final SocketChannel channel;
    private final SSLEngine engine;
    /** Records received, not yet decrypted (read mode: flipped). */
    private final ByteBuffer netIn;
    /** Decrypted, not yet read (flipped). */
    private final ByteBuffer appIn;
    /** Records made, not yet sent (flipped); guarded by {@link #writeLock}. */
    private final ByteBuffer netOut;
    private final java.util.concurrent.locks.ReentrantLock writeLock = new java.util.concurrent.locks.ReentrantLock();
    private volatile boolean pending;
    private boolean inboundClosed;
    /** The handshake is over: a record that needs an answer (a key update) is answered by the reader. */
    private boolean established;

    private TlsWire(SocketChannel channel, SSLEngine engine) {
        this.channel = channel;
        this.engine = engine;
        SSLSession s = engine.getSession();
        this.netIn = ByteBuffer.allocateDirect(s.getPacketBufferSize() * IN_RECORDS).flip();
        this.appIn = ByteBuffer.allocateDirect(s.getApplicationBufferSize()).flip();
        this.netOut = ByteBuffer.allocateDirect(s.getPacketBufferSize() * OUT_RECORDS).flip();
    }

    /**
     * Runs the server side of a TLS handshake on {@code channel} (blocking, as during the NBD handshake), bytes the
     * client sent before it being none: the caller checked. The connection's handshake timeout bounds it (closing the
     * channel ends a blocked read).
     */
    static TlsWire handshake(SocketChannel channel, SSLEngine engine) throws IOException {
        TlsWire w = new TlsWire(channel, engine);
        engine.beginHandshake();
        while (true) {
            switch (engine.getHandshakeStatus()) {
                case NEED_TASK -> runTasks(engine);
                case NEED_WRAP -> {
                    w.writeLock.lock();
                    try {
                        w.wrap(new ByteBuffer[0], 0, 0);
                        w.flushBlocking();
                    } finally {
                        w.writeLock.unlock();
                    }
                }
                case NEED_UNWRAP, NEED_UNWRAP_AGAIN -> {
                    if (!w.unwrapSome() && w.fill() < 0) {
                        throw new EOFException("client closed the connection during the TLS handshake");
                    }
                }
                case FINISHED, NOT_HANDSHAKING -> {
                    w.established = true;
                    return w;
                }
            }
        }
    }

    private static void runTasks(SSLEngine engine) {
        Runnable t;
        while ((t = engine.getDelegatedTask()) != null) {
            t.run();
        }
    }

    @Override
    public SocketChannel socket() {
        return channel;
    }

    /** For the log: protocol, cipher suite, and who the client proved to be. */
    @Override
    public String describe() {
        SSLSession s = engine.getSession();
        String client = "";
        try {
            java.security.cert.Certificate[] certs = s.getPeerCertificates();
            if (certs.length > 0 && certs[0] instanceof java.security.cert.X509Certificate x) {
                client = ", client " + x.getSubjectX500Principal().getName();
            }
        } catch (javax.net.ssl.SSLPeerUnverifiedException e) {
            // no client certificate asked for
        }
        return s.getProtocol() + ", " + s.getCipherSuite() + client;
    }

    @Override
    public boolean bufferedInput() {
        return appIn.hasRemaining();
    }

    @Override
    public int read(ByteBuffer dst) throws IOException {
        int total = 0;
        boolean readSocket = false;
        while (dst.hasRemaining()) {
            if (appIn.hasRemaining()) {
                total += copy(appIn, dst);
                continue;
            }
            if (inboundClosed) {
                return total > 0 ? total : -1;
            }
            if (dst.remaining() >= appIn.capacity() && established) {
                int before = dst.position();
                if (unwrapInto(dst)) {
                    total += dst.position() - before;
                    continue;
                }
            } else if (unwrapSome()) {
                continue;
            }
            if (readSocket || total > 0) {
                // One socket read per call, and none once there is something to return: during the NBD handshake
                // the socket blocks, and the client may be waiting for our answer to what we return.
                break;
            }
            readSocket = true;
            int n = fill();
            if (n < 0) {
                inboundClosed = true; // a close without close_notify: the client went away
                return total > 0 ? total : -1;
            }
            if (n == 0) {
                break;
            }
        }
        return total;
    }

    private static int copy(ByteBuffer from, ByteBuffer to) {
        int n = Math.min(from.remaining(), to.remaining());
        ByteBuffer slice = from.slice(from.position(), n);
        to.put(slice);
        from.position(from.position() + n);
        return n;
    }

    /** Reads what the socket has into {@link #netIn}; -1 at its end. */
    private int fill() throws IOException {
        netIn.compact();
        try {
            if (!netIn.hasRemaining()) {
                throw new SSLException("a TLS record larger than " + netIn.capacity() + " bytes");
            }
            return channel.read(netIn);
        } finally {
            netIn.flip();
        }
    }

    /** Decrypts one record from {@link #netIn} straight into {@code dst} (room for a record's plaintext). */
    private boolean unwrapInto(ByteBuffer dst) throws IOException {
        if (!netIn.hasRemaining()) {
            return false;
        }
        SSLEngineResult r = engine.unwrap(netIn, dst);
        return afterUnwrap(r);
    }

    /**
     * Decrypts one record from {@link #netIn} into {@link #appIn} (empty on entry, or during the handshake); answers
     * what the engine must answer. True when it made progress, false when a whole record is not here yet.
     */
    private boolean unwrapSome() throws IOException {
        if (!netIn.hasRemaining()) {
            return false;
        }
        appIn.compact();
        SSLEngineResult r;
        try {
            r = engine.unwrap(netIn, appIn);
        } finally {
            appIn.flip();
        }
        return afterUnwrap(r);
    }

    /** What an unwrap's result means: progress or not; answers what the engine must answer. */
    private boolean afterUnwrap(SSLEngineResult r) throws IOException {
        switch (r.getStatus()) {
            case BUFFER_UNDERFLOW -> {
                return false;
            }
            case BUFFER_OVERFLOW -> throw new SSLException("a TLS record larger than the application buffer");
            case CLOSED -> {
                inboundClosed = true;
                answerClose();
                return true;
            }
            case OK -> {
            }
        }
        if (r.getHandshakeStatus() == SSLEngineResult.HandshakeStatus.NEED_TASK) {
            runTasks(engine);
        }
        if (established && engine.getHandshakeStatus() == SSLEngineResult.HandshakeStatus.NEED_WRAP) {
            writeLock.lock();
            try { // a key update to answer
                wrap(new ByteBuffer[0], 0, 0);
                flush();
            } finally {
                writeLock.unlock();
            }
        }
        return r.bytesConsumed() > 0 || r.bytesProduced() > 0;
    }

    private void answerClose() throws IOException {
        writeLock.lock();
        try {
            engine.closeOutbound();
            try {
                wrap(new ByteBuffer[0], 0, 0);
                flush();
            } catch (IOException e) {
                // the client is closing anyway
            }
        } finally {
            writeLock.unlock();
        }
    }

    @Override
    public long write(ByteBuffer[] srcs, int offset, int length) throws IOException {
        writeLock.lock();
        try {
            if (!flush()) {
                return 0;
            }
            long taken = 0;
            while (remaining(srcs, offset, length) > 0) {
                long n = wrap(srcs, offset, length);
                taken += n;
                if (!flush() || n == 0) {
                    break;
                }
            }
            return taken;
        } finally {
            writeLock.unlock();
        }
    }

    private static long remaining(ByteBuffer[] srcs, int offset, int length) {
        long n = 0;
        for (int i = offset; i < offset + length; i++) {
            n += srcs[i].remaining();
        }
        return n;
    }

    /** Wraps into {@link #netOut} while it has room for a record; returns the plaintext bytes taken. Under the lock. */
    private long wrap(ByteBuffer[] srcs, int offset, int length) throws IOException {
        long taken = 0;
        int record = engine.getSession().getPacketBufferSize();
        netOut.compact();
        try {
            do {
                if (netOut.remaining() < record) {
                    break;
                }
                SSLEngineResult r = engine.wrap(srcs, offset, length, netOut);
                if (r.getStatus() == SSLEngineResult.Status.CLOSED && r.bytesProduced() == 0) {
                    if (taken == 0 && remaining(srcs, offset, length) > 0) {
                        throw new ClosedChannelException();
                    }
                    break;
                }
                if (r.getStatus() == SSLEngineResult.Status.BUFFER_OVERFLOW) {
                    break;
                }
                if (r.getHandshakeStatus() == SSLEngineResult.HandshakeStatus.NEED_TASK) {
                    runTasks(engine);
                }
                taken += r.bytesConsumed();
                if (r.bytesConsumed() == 0 && r.bytesProduced() == 0) {
                    break;
                }
            } while (remaining(srcs, offset, length) > 0);
        } finally {
            netOut.flip();
            pending = netOut.hasRemaining();
        }
        return taken;
    }

    @Override
    public boolean flush() throws IOException {
        writeLock.lock();
        try {
            while (netOut.hasRemaining()) {
                if (channel.write(netOut) == 0) {
                    break;
                }
            }
            pending = netOut.hasRemaining();
            return !pending;
        } finally {
            writeLock.unlock();
        }
    }

    private void flushBlocking() throws IOException {
        while (netOut.hasRemaining()) {
            channel.write(netOut);
        }
        pending = false;
    }

    @Override
    public boolean pendingOutput() {
        return pending;
    }

    @Override
    public void closeQuietly() {
        if (!writeLock.tryLock()) {
            return; // a writer is busy (perhaps blocked in the handshake): the close will do without it
        }
        try {
            try {
                engine.closeOutbound();
                wrap(new ByteBuffer[0], 0, 0);
                flush();
            } catch (IOException | RuntimeException e) {
                // closing anyway
            }
        } finally {
            writeLock.unlock();
        }
    }
}
