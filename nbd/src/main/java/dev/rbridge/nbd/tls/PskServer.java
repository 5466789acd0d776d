package dev.rbridge.nbd.tls;

import org.bouncycastle.tls.BasicTlsPSKExternal;
import org.bouncycastle.tls.CipherSuite;
import org.bouncycastle.tls.PSKTlsServer;
import org.bouncycastle.tls.ProtocolVersion;
import org.bouncycastle.tls.PskIdentity;
import org.bouncycastle.tls.TlsPSKExternal;
import org.bouncycastle.tls.TlsPSKIdentityManager;
import org.bouncycastle.tls.crypto.impl.bc.BcTlsCrypto;

import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.Vector;

/**
 * The server side of one TLS-PSK handshake (Bouncy Castle's TLS API: JSSE has no PSK cipher suites). TLS 1.3 with an
 * external PSK and (EC)DHE, as GnuTLS clients (libnbd, qemu) prefer; TLS 1.2 with the (EC)DHE-PSK suites GnuTLS
 * offers (not plain PSK, which has no forward secrecy). The identity the client names picks the key; an unknown one ends the handshake.
 * TLS 1.3 offers only SHA-256 suites: an external PSK is bound to SHA-256 (GnuTLS's and this side's default), and a
 * SHA-384 suite chosen with it derives keys the client does not ("Decryption has failed" from GnuTLS).
 */
public final class PskServer extends PSKTlsServer {
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final int[] SUITES = {
            CipherSuite.TLS_AES_128_GCM_SHA256,
            CipherSuite.TLS_CHACHA20_POLY1305_SHA256,
            CipherSuite.TLS_ECDHE_PSK_WITH_CHACHA20_POLY1305_SHA256,
            CipherSuite.TLS_DHE_PSK_WITH_AES_256_GCM_SHA384, CipherSuite.TLS_DHE_PSK_WITH_AES_128_GCM_SHA256,
            CipherSuite.TLS_DHE_PSK_WITH_CHACHA20_POLY1305_SHA256,
            CipherSuite.TLS_ECDHE_PSK_WITH_AES_256_CBC_SHA384, CipherSuite.TLS_ECDHE_PSK_WITH_AES_128_CBC_SHA256};

    private final PskKeys keys;
    /** The identity the client was known by, once it was. */
    private volatile String identity;

    /** The protocol version agreed, for the log. */
    public String protocolVersion() {
        return context == null || context.getServerVersion() == null ? "?" : context.getServerVersion().getName();
    }

    /** The identity the client was known by (null before the handshake found it). */
    public String identity() {
        return identity;
    }

    PskServer(PskKeys keys) {
        this(new BcTlsCrypto(RANDOM), keys);
    }

    private PskServer(BcTlsCrypto crypto, PskKeys keys) {
        super(crypto, new Identities(keys));
        this.keys = keys;
        ((Identities) pskIdentityManager).server = this;
    }

    private static final class Identities implements TlsPSKIdentityManager {
        private final PskKeys keys;
        private PskServer server;

        Identities(PskKeys keys) {
            this.keys = keys;
        }

        @Override
        public byte[] getHint() {
            return null;
        }

        @Override
        public byte[] getPSK(byte[] id) {
            String name = new String(id, StandardCharsets.UTF_8);
            byte[] key = keys.key(name);
            if (key != null) {
                server.identity = name;
            }
            return key;
        }
    }

    @Override
    protected ProtocolVersion[] getSupportedVersions() {
        return ProtocolVersion.TLSv13.downTo(ProtocolVersion.TLSv12);
    }

    @Override
    protected int[] getSupportedCipherSuites() {
        return SUITES.clone();
    }

    @Override
    @SuppressWarnings("rawtypes") // Bouncy Castle's signature
    public TlsPSKExternal getExternalPSK(Vector identities) {
        for (Object o : identities) {
            byte[] id = ((PskIdentity) o).getIdentity();
            String name = new String(id, StandardCharsets.UTF_8);
            byte[] key = keys.key(name);
            if (key != null) {
                identity = name;
                return new BasicTlsPSKExternal(id, getCrypto().createSecret(key));
            }
        }
        return null;
    }
}
