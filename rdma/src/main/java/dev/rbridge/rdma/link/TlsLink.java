package dev.rbridge.rdma.link;

import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLEngineResult;
import javax.net.ssl.SSLEngineResult.HandshakeStatus;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLPeerUnverifiedException;
import javax.net.ssl.SSLSession;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;
import java.util.concurrent.locks.ReentrantLock;

/**
 * TLS 1.3 over a blocking socket, through JSSE's {@link SSLEngine}: the memserver wire's encryption (the tcp
 * provider's whole connection, the ucx provider's control connection). The handshake runs in the factory methods, so a
 * link exists only once the peer is authenticated; the caller bounds it in time by closing the socket (the client's
 * connect timeout, the memserver's hello guard).
 *
 * <p>Reads decrypt straight into the caller's buffer when it has room for a whole record (a WRITE's data goes from
 * the socket to region memory with no copy but the decryption's), through a record-sized buffer otherwise. Writes
 * wrap up to {@value #RECORDS_PER_IO} records before each socket write. A reader that meets a handshake message after
 * the handshake (a TLS 1.3 key update) answers it only if no writer holds the socket; otherwise the writer's next
 * wrap sends the answer first, as the engine requires, so a reader never waits on a writer that waits on the peer.
 *
 * <p>No close_notify is sent: every message of the wire is framed, so a truncated stream is found by its framing.
 */
public final class TlsLink implements Link {
    /** The only protocol: both ends are this project, and 1.3 has neither renegotiation nor static-RSA suites. */
    public static final String PROTOCOL = "TLSv1.3";
    /**
     * AES-128 first: its GCM moves the most bytes per CPU second in the JDK, and both ends are ours; the others stay
     * allowed.
     */
    private static final String[] SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
            "TLS_CHACHA20_POLY1305_SHA256"};
    /** Records wrapped into one socket write, and read from the socket at most at once. */
    private static final int RECORDS_PER_IO = 4;
    private static final ByteBuffer EMPTY = ByteBuffer.allocate(0);
    private static final byte CONTENT_ALERT = 21;
    private static final byte CONTENT_HANDSHAKE = 22;

    private final SocketChannel channel;
    private final SSLEngine engine;
    private final ReentrantLock reading = new ReentrantLock();
    private final ReentrantLock writing = new ReentrantLock();
    private final int packetSize;
    /** Ciphertext from the socket not unwrapped yet, in write mode. The reader's. */
    private ByteBuffer netIn;
    /** Plaintext unwrapped but not returned yet, in read mode. The reader's. */
    private ByteBuffer appIn;
    /** Ciphertext being sent. The writer's. */
    private final ByteBuffer netOut;
    /** Whether the peer's first bytes were checked to be TLS. */
    private boolean firstInputChecked;
    private boolean inboundDone;
    private InputStream stream;
    /** The client's: the memserver's name as given, to explain a refusal; null on the memserver's side. */
    private final String peerHost;
    /** Application data has come: from here on a TLS failure is the stream's, not the handshake's. Reader's. */
    private boolean dataSeen;
    /** A handshake answer (a key update's) is queued for a thread that may block sending it. */
    private final java.util.concurrent.atomic.AtomicBoolean answerQueued =
            new java.util.concurrent.atomic.AtomicBoolean();

    private TlsLink(SocketChannel channel, SSLEngine engine, String peerHost) {
        this.channel = channel;
        this.peerHost = peerHost;
        this.engine = engine;
        SSLSession s = engine.getSession();
        this.packetSize = s.getPacketBufferSize();
        this.netIn = ByteBuffer.allocate(packetSize * RECORDS_PER_IO);
        this.appIn = ByteBuffer.allocate(s.getApplicationBufferSize()).flip();
        this.netOut = ByteBuffer.allocate(packetSize * RECORDS_PER_IO);
    }

    /**
     * The client's end, after a handshake that checked the server's certificate against {@code context}'s CA and its
     * name against {@code peer} as given (a host name against the certificate's DNS names, an address against its IP
     * addresses). {@link PlainPeerException} when the server answered in clear; SSLException for every other refusal.
     */
    public static TlsLink client(SocketChannel channel, SSLContext context, InetSocketAddress peer)
            throws IOException {
        SSLEngine e = context.createSSLEngine(peer.getHostString(), peer.getPort());
        e.setUseClientMode(true);
        SSLParameters p = e.getSSLParameters();
        p.setProtocols(new String[]{PROTOCOL});
        p.setCipherSuites(SUITES);
        p.setEndpointIdentificationAlgorithm("HTTPS"); // RFC 2818 name checks: the certificate must be this host's
        e.setSSLParameters(p);
        TlsLink link = new TlsLink(channel, e, peer.getHostString());
        link.handshake();
        return link;
    }

    /**
     * The server's end, after the handshake; with {@code verifyPeer} the client must present a certificate that
     * chains to {@code context}'s CA. {@link PlainPeerException} when the client spoke in clear.
     */
    public static TlsLink server(SocketChannel channel, SSLContext context, boolean verifyPeer) throws IOException {
        SSLEngine e = context.createSSLEngine();
        e.setUseClientMode(false);
        SSLParameters p = e.getSSLParameters();
        p.setProtocols(new String[]{PROTOCOL});
        p.setCipherSuites(SUITES);
        p.setUseCipherSuitesOrder(true);
        p.setNeedClientAuth(verifyPeer);
        e.setSSLParameters(p);
        TlsLink link = new TlsLink(channel, e, null);
        link.handshake();
        return link;
    }

    /** The peer's first bytes were not TLS: it speaks the wire in clear (or answered in clear, refusing us). */
    public static final class PlainPeerException extends SSLException {
        private final byte[] received;

        PlainPeerException(byte[] received) {
            super("the peer does not speak TLS (its first bytes are not a TLS handshake)");
            this.received = received;
        }

        /** What it sent in clear, as far as it was read: a memserver's refusal, or a client's greeting. */
        public java.nio.ByteBuffer received() {
            return java.nio.ByteBuffer.wrap(received).asReadOnlyBuffer();
        }
    }

    private void handshake() throws IOException {
        try {
            engine.beginHandshake();
            HandshakeStatus hs = engine.getHandshakeStatus();
            while (hs != HandshakeStatus.FINISHED && hs != HandshakeStatus.NOT_HANDSHAKING) {
                switch (hs) {
                    case NEED_TASK -> hs = runTasks();
                    case NEED_WRAP -> hs = wrapHandshake();
                    default -> { // NEED_UNWRAP, NEED_UNWRAP_AGAIN: application data after it stays in appIn
                        SSLEngineResult r = unwrap(appIn.compact());
                        appIn.flip();
                        if (r == null) {
                            throw new SSLException("the peer closed the connection during the TLS handshake");
                        }
                        if (r.getStatus() == SSLEngineResult.Status.CLOSED) {
                            throw new SSLException("the peer ended TLS during the handshake");
                        }
                        if (r.getStatus() == SSLEngineResult.Status.BUFFER_OVERFLOW) {
                            growAppIn();
                        }
                        hs = r.getHandshakeStatus();
                    }
                }
            }
        } catch (PlainPeerException e) {
            throw e;
        } catch (SSLException e) {
            sendAlert(); // the reason goes to the peer too (bad_certificate, ...), not just a closed socket
            throw e;
        }
    }

    private HandshakeStatus runTasks() {
        Runnable task;
        while ((task = engine.getDelegatedTask()) != null) {
            task.run();
        }
        return engine.getHandshakeStatus();
    }

    private HandshakeStatus wrapHandshake() throws IOException {
        writing.lock();
        try {
            netOut.clear();
            SSLEngineResult r = engine.wrap(EMPTY, netOut);
            send(netOut.flip());
            if (r.getStatus() == SSLEngineResult.Status.CLOSED) {
                throw new SSLException("TLS ended during the handshake");
            }
            return r.getHandshakeStatus();
        } finally {
            writing.unlock();
        }
    }

    /** After a failed handshake the engine holds an alert saying why; send it if the socket takes it now. */
    private void sendAlert() {
        if (!writing.tryLock()) {
            return;
        }
        try {
            netOut.clear();
            engine.wrap(EMPTY, netOut);
            netOut.flip();
            if (netOut.hasRemaining()) {
                channel.write(netOut);
            }
        } catch (IOException | RuntimeException ignored) {
            // the alert is a courtesy: the handshake's own failure is what the caller reports
        } finally {
            writing.unlock();
        }
    }

    /**
     * One unwrap from {@link #netIn} into {@code target}, reading the socket first whenever no whole record is in;
     * null at the end of the stream.
     */
    private SSLEngineResult unwrap(ByteBuffer target) throws IOException {
        while (true) {
            SSLEngineResult r;
            netIn.flip();
            try {
                r = engine.unwrap(netIn, target);
            } finally {
                netIn.compact();
            }
            if (r.getStatus() != SSLEngineResult.Status.BUFFER_UNDERFLOW) {
                return r;
            }
            if (!netIn.hasRemaining()) { // a record larger than the session said: make room for it
                ByteBuffer bigger = ByteBuffer.allocate(netIn.capacity() + engine.getSession().getPacketBufferSize());
                netIn = bigger.put(netIn.flip());
            }
            if (channel.read(netIn) < 0) {
                return null;
            }
            if (!firstInputChecked && netIn.position() > 0) {
                firstInputChecked = true;
                byte type = netIn.get(0);
                if (type != CONTENT_HANDSHAKE && type != CONTENT_ALERT) {
                    byte[] clear = new byte[netIn.position()];
                    netIn.get(0, clear);
                    throw new PlainPeerException(clear);
                }
            }
        }
    }

    private void growAppIn() {
        ByteBuffer bigger = ByteBuffer.allocate(Math.max(appIn.capacity() * 2,
                engine.getSession().getApplicationBufferSize()));
        appIn = bigger.put(appIn).flip();
    }

    @Override
    public int read(ByteBuffer dst) throws IOException {
        try {
            return readLocked(dst);
        } catch (PlainPeerException e) {
            throw e;
        } catch (SSLException e) {
            if (dataSeen) {
                throw new SSLException("TLS failed mid-connection: a record did not decrypt or verify, so data was"
                        + " altered on the way or the peer failed [" + e.getMessage() + "]", e);
            }
            // TLS 1.3 lets a client finish its handshake before the server checked its certificate: the server's
            // refusal is the first thing it reads.
            if (peerHost != null) {
                throw new SSLException("TLS handshake failed: " + TlsFailures.explain(e, peerHost), e);
            }
            throw e;
        }
    }

    private int readLocked(ByteBuffer dst) throws IOException {
        reading.lock();
        try {
            if (appIn.hasRemaining()) {
                return drain(dst);
            }
            if (inboundDone) {
                return -1;
            }
            boolean viaBuffer = false;
            while (true) {
                // Straight into the caller's buffer when a whole record surely fits (no copy), else through appIn.
                boolean direct = !viaBuffer && dst.remaining() >= appIn.capacity();
                ByteBuffer target = direct ? dst : appIn.clear();
                SSLEngineResult r;
                try {
                    r = unwrap(target);
                } finally {
                    if (!direct) {
                        appIn.flip();
                    }
                }
                if (r == null) {
                    inboundDone = true;
                    return -1;
                }
                afterUnwrap(r.getHandshakeStatus());
                switch (r.getStatus()) {
                    case OK -> {
                        if (r.bytesProduced() > 0) {
                            dataSeen = true;
                            return direct ? r.bytesProduced() : drain(dst);
                        }
                        // a handshake message (a session ticket, a key update): read on
                    }
                    case CLOSED -> {
                        inboundDone = true;
                        return -1;
                    }
                    case BUFFER_OVERFLOW -> {
                        if (direct) {
                            viaBuffer = true;
                        } else {
                            growAppIn();
                        }
                    }
                    case BUFFER_UNDERFLOW -> throw new IllegalStateException("unwrap reads until a record is in");
                }
            }
        } finally {
            reading.unlock();
        }
    }

    private int drain(ByteBuffer dst) {
        int n = Math.min(dst.remaining(), appIn.remaining());
        dst.put(appIn.slice(appIn.position(), n));
        appIn.position(appIn.position() + n);
        return n;
    }

    /**
     * Post-handshake messages: tasks run here; an answer (to a key update) goes out from a thread of its own, since
     * sending may block until the peer reads, and the peer may be waiting for this reader to read its replies.
     */
    private void afterUnwrap(HandshakeStatus hs) {
        if (hs == HandshakeStatus.NEED_TASK) {
            hs = runTasks();
        }
        if (hs == HandshakeStatus.NEED_WRAP && answerQueued.compareAndSet(false, true)) {
            Thread.ofVirtual().name("rdma-tls-answer").start(this::sendAnswer);
        }
    }

    private void sendAnswer() {
        writing.lock();
        try {
            answerQueued.set(false); // a later one queues anew; this one goes now
            while (engine.getHandshakeStatus() == HandshakeStatus.NEED_WRAP) {
                netOut.clear();
                SSLEngineResult r = engine.wrap(EMPTY, netOut);
                send(netOut.flip());
                if (r.getStatus() == SSLEngineResult.Status.CLOSED || r.bytesProduced() == 0) {
                    break;
                }
            }
        } catch (IOException | RuntimeException e) {
            // the connection is failing: its reader and writers see that for themselves
        } finally {
            writing.unlock();
        }
    }

    @Override
    public long write(ByteBuffer[] srcs, int offset, int length) throws IOException {
        writing.lock();
        try {
            long taken = 0;
            do {
                netOut.clear();
                while (netOut.remaining() >= packetSize && (remaining(srcs, offset, length)
                        || engine.getHandshakeStatus() == HandshakeStatus.NEED_WRAP)) {
                    SSLEngineResult r = engine.wrap(srcs, offset, length, netOut);
                    if (r.getStatus() == SSLEngineResult.Status.CLOSED) {
                        throw new ClosedChannelException();
                    }
                    if (r.getStatus() == SSLEngineResult.Status.BUFFER_OVERFLOW
                            || r.bytesConsumed() == 0 && r.bytesProduced() == 0) {
                        break;
                    }
                    taken += r.bytesConsumed();
                    if (r.getHandshakeStatus() == HandshakeStatus.NEED_TASK) {
                        runTasks();
                    }
                }
                send(netOut.flip());
            } while (remaining(srcs, offset, length));
            return taken;
        } finally {
            writing.unlock();
        }
    }

    private static boolean remaining(ByteBuffer[] srcs, int offset, int length) {
        for (int i = offset; i < offset + length; i++) {
            if (srcs[i].hasRemaining()) {
                return true;
            }
        }
        return false;
    }

    private void send(ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            channel.write(b);
        }
    }

    @Override
    public SocketChannel socket() {
        return channel;
    }

    @Override
    public int available() throws IOException {
        if (appIn.hasRemaining() || netIn.position() > 0) {
            return Math.max(1, appIn.remaining());
        }
        if (stream == null) {
            stream = channel.socket().getInputStream();
        }
        return stream.available();
    }

    /** Who the peer proved to be: its certificate's subject, or null when it presented none. */
    public String peerSubject() {
        try {
            return engine.getSession().getPeerPrincipal().getName();
        } catch (SSLPeerUnverifiedException e) {
            return null;
        }
    }

    @Override
    public String describe() {
        SSLSession s = engine.getSession();
        String subject = peerSubject();
        return s.getProtocol() + " " + s.getCipherSuite() + (subject == null ? "" : ", peer " + subject);
    }
}
