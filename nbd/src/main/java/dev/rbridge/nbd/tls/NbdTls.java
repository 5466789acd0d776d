package dev.rbridge.nbd.tls;

import dev.rbridge.common.tls.X509Credentials;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLParameters;
import java.util.Objects;

/**
 * The NBD server's TLS settings: the mode and, unless it is off, the credentials each upgraded connection's engine is
 * made from. Made once, at start, from files ({@link X509Credentials}); a server never reads them again.
 */
public final class NbdTls {
    /** Only TLS 1.3 and 1.2: what GnuTLS (libnbd, qemu, nbdkit) and JSSE share, and nothing older. */
    static final String[] PROTOCOLS = {"TLSv1.3", "TLSv1.2"};

    public static final NbdTls OFF = new NbdTls(TlsMode.OFF, null, null, false, "off");

    static {
        // TLS 1.2 renegotiation a client starts would run inside a connection's replies, which the wire does not
        // handle; nobody needs it (TLS 1.3 has none). JSSE reads this once, when it first starts.
        if (System.getProperty("jdk.tls.rejectClientInitiatedRenegotiation") == null) {
            System.setProperty("jdk.tls.rejectClientInitiatedRenegotiation", "true");
        }
    }

    private final TlsMode mode;
    private final SSLContext context;
    private final PskKeys psk;
    private final boolean verifyPeer;
    private final String description;

    private NbdTls(TlsMode mode, SSLContext context, PskKeys psk, boolean verifyPeer, String description) {
        this.mode = mode;
        this.context = context;
        this.psk = psk;
        this.verifyPeer = verifyPeer;
        this.description = description;
    }

    /** TLS-PSK in {@code mode} (on or require) with these keys: no certificates; both sides hold the key. */
    public static NbdTls psk(TlsMode mode, PskKeys keys) {
        if (mode == TlsMode.OFF) {
            return OFF;
        }
        return new NbdTls(mode, null, Objects.requireNonNull(keys), false, "PSK from " + keys.file());
    }

    /** Pre-shared keys rather than certificates: {@link #newPskServer}, not {@link #newEngine}. */
    public boolean usesPsk() {
        return psk != null;
    }

    /** The server side of a TLS-PSK handshake for one connection. */
    public PskServer newPskServer() {
        if (psk == null) {
            throw new IllegalStateException("TLS-PSK is not configured");
        }
        return new PskServer(psk);
    }

    /**
     * TLS in {@code mode} (on or require) with an SSL context holding the server's certificate and key, and, when
     * {@code verifyPeer}, the CA that client certificates must chain to (a client without one is refused).
     */
    public static NbdTls of(TlsMode mode, SSLContext context, boolean verifyPeer, String description) {
        if (mode == TlsMode.OFF) {
            return OFF;
        }
        return new NbdTls(mode, Objects.requireNonNull(context), null, verifyPeer, description);
    }

    public TlsMode mode() {
        return mode;
    }

    public boolean enabled() {
        return mode != TlsMode.OFF;
    }

    public boolean required() {
        return mode == TlsMode.REQUIRE;
    }

    /** A server-side engine for one connection. */
    public SSLEngine newEngine() {
        if (context == null) {
            throw new IllegalStateException("TLS is off");
        }
        SSLEngine engine = context.createSSLEngine();
        engine.setUseClientMode(false);
        SSLParameters p = engine.getSSLParameters();
        p.setProtocols(PROTOCOLS);
        p.setNeedClientAuth(verifyPeer);
        engine.setSSLParameters(p);
        return engine;
    }

    /** For logs: the mode and where the credentials came from. */
    @Override
    public String toString() {
        return mode == TlsMode.OFF ? "off"
                : mode + " (" + description + (verifyPeer ? ", client certificates "
                        + "verified" : "") + ")";
    }
}
