package dev.rbridge.common.tls;

import org.bouncycastle.asn1.pkcs.PrivateKeyInfo;
import org.bouncycastle.openssl.PEMKeyPair;
import org.bouncycastle.openssl.PEMParser;
import org.bouncycastle.openssl.jcajce.JcaPEMKeyConverter;

import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;
import java.io.IOException;
import java.io.InputStream;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.PublicKey;
import java.security.Signature;
import java.security.cert.Certificate;
import java.security.cert.CertificateExpiredException;
import java.security.cert.CertificateFactory;
import java.security.cert.CertificateNotYetValidException;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.List;

/**
 * X.509 credentials from a directory laid out as nbdkit's and qemu's {@code --tls-certificates}/{@code
 * tls-creds-x509,dir=} expect: {@code server-cert.pem} (the server's certificate, then any intermediates),
 * {@code server-key.pem} (its private key: PKCS#8, or the PKCS#1 RSA or SEC1 EC forms certtool and openssl write;
 * not encrypted) and {@code ca-cert.pem} (the CA that client certificates must chain to; needed only to verify
 * clients). Every problem is found here, at start, and said with the file it is in: a missing or unreadable file, a
 * key that does not match the certificate, a certificate that has expired or is not valid yet.
 */
public final class X509Credentials {
    public static final String CA_CERT = "ca-cert.pem";
    public static final String SERVER_CERT = "server-cert.pem";
    public static final String SERVER_KEY = "server-key.pem";
    public static final String CLIENT_CERT = "client-cert.pem";
    public static final String CLIENT_KEY = "client-key.pem";

    private X509Credentials() {}

    /**
     * The SSL context for a server (NBD, memserver): its certificate and key, and with {@code verifyPeer} the CA
     * its clients' certificates must chain to. IllegalArgumentException saying what is wrong with which file.
     */
    public static SSLContext serverContext(Path dir, boolean verifyPeer) {
        try {
            KeyManagerFactory kmf = keyManagers(dir, SERVER_CERT, SERVER_KEY);
            TrustManagerFactory tmf = verifyPeer ? trustManagers(dir) : null;
            SSLContext context = SSLContext.getInstance("TLS");
            context.init(kmf.getKeyManagers(), tmf == null ? null : tmf.getTrustManagers(), null);
            return context;
        } catch (GeneralSecurityException | IOException e) {
            throw new IllegalArgumentException("cannot use the certificates in " + dir + ": " + e.getMessage(), e);
        }
    }

    /**
     * The SSL context for a client (of a memserver): {@code ca-cert.pem}, the CA the server's certificate must chain
     * to, and when the directory has them {@code client-cert.pem} and {@code client-key.pem}, the certificate it
     * proves itself with to a server that verifies clients (qemu's and libnbd's names for a client's directory).
     */
    public static SSLContext clientContext(Path dir) {
        try {
            KeyManagerFactory kmf = Files.exists(dir.resolve(CLIENT_CERT)) || Files.exists(dir.resolve(CLIENT_KEY))
                    ? keyManagers(dir, CLIENT_CERT, CLIENT_KEY)
                    : null;
            SSLContext context = SSLContext.getInstance("TLS");
            context.init(kmf == null ? null : kmf.getKeyManagers(), trustManagers(dir).getTrustManagers(), null);
            return context;
        } catch (GeneralSecurityException | IOException e) {
            throw new IllegalArgumentException("cannot use the certificates in " + dir + ": " + e.getMessage(), e);
        }
    }

    /** Whether {@code dir} holds a client certificate, which {@link #clientContext} then presents. */
    public static boolean hasClientCertificate(Path dir) {
        return Files.exists(dir.resolve(CLIENT_CERT));
    }

    private static KeyManagerFactory keyManagers(Path dir, String certFile, String keyFile)
            throws GeneralSecurityException, IOException {
        List<X509Certificate> chain = certificates(dir.resolve(certFile));
        PrivateKey key = privateKey(dir.resolve(keyFile));
        X509Certificate leaf = chain.get(0);
        checkValid(dir.resolve(certFile), leaf);
        checkPair(dir.resolve(certFile), dir.resolve(keyFile), leaf.getPublicKey(), key);
        KeyStore ks = KeyStore.getInstance("PKCS12");
        ks.load(null, null);
        char[] none = new char[0];
        ks.setKeyEntry("own", key, none, chain.toArray(Certificate[]::new));
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(ks, none);
        return kmf;
    }

    private static TrustManagerFactory trustManagers(Path dir) throws GeneralSecurityException, IOException {
        List<X509Certificate> cas = certificates(dir.resolve(CA_CERT));
        KeyStore trust = KeyStore.getInstance("PKCS12");
        trust.load(null, null);
        for (int i = 0; i < cas.size(); i++) {
            trust.setCertificateEntry("ca-" + i, cas.get(i));
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(trust);
        return tmf;
    }

    /** Every certificate in a PEM file, in order; IllegalArgumentException naming the file. */
    static List<X509Certificate> certificates(Path file) {
        try (InputStream in = Files.newInputStream(file)) {
            List<X509Certificate> out = new ArrayList<>();
            for (Certificate c : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                out.add((X509Certificate) c);
            }
            if (out.isEmpty()) {
                throw new IllegalArgumentException(file + ": no PEM certificate in it");
            }
            return out;
        } catch (NoSuchFileException e) {
            throw missing(file);
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalArgumentException(file + ": not a PEM certificate (" + e.getMessage() + ")", e);
        }
    }

    /** The unencrypted private key of a PEM file (PKCS#8, PKCS#1, SEC1); IllegalArgumentException naming the file. */
    static PrivateKey privateKey(Path file) {
        try (Reader r = Files.newBufferedReader(file, StandardCharsets.US_ASCII); PEMParser p = new PEMParser(r)) {
            Object o = p.readObject();
            JcaPEMKeyConverter converter = new JcaPEMKeyConverter();
            return switch (o) {
                case PEMKeyPair pair -> converter.getPrivateKey(pair.getPrivateKeyInfo());
                case PrivateKeyInfo info -> converter.getPrivateKey(info);
                case null -> throw new IllegalArgumentException(file + ": no PEM private key in it");
                default -> throw new IllegalArgumentException(file + ": " + describe(o) + ", not an unencrypted "
                        + "private key (decrypt it first, e.g. openssl pkey -in KEY -out " + file.getFileName() + ")");
            };
        } catch (NoSuchFileException e) {
            throw missing(file);
        } catch (IOException e) {
            throw new IllegalArgumentException(file + ": not a PEM private key (" + e.getMessage() + ")", e);
        }
    }

    private static String describe(Object o) {
        String n = o.getClass().getSimpleName();
        return n.contains("Encrypted") ? "an encrypted key" : "a " + n;
    }

    private static IllegalArgumentException missing(Path file) {
        return new IllegalArgumentException(file + " not found: a server's directory holds " + SERVER_CERT + " and "
                + SERVER_KEY + ", and " + CA_CERT + " to verify clients; a client's " + CA_CERT + ", and "
                + CLIENT_CERT + " and " + CLIENT_KEY + " to prove itself (the names nbdkit and qemu use)");
    }

    private static void checkValid(Path file, X509Certificate c) {
        try {
            c.checkValidity();
        } catch (CertificateExpiredException e) {
            throw new IllegalArgumentException(file + ": the certificate expired on " + c.getNotAfter().toInstant()
                    + "; peers would refuse it");
        } catch (CertificateNotYetValidException e) {
            throw new IllegalArgumentException(file + ": the certificate is not valid before "
                    + c.getNotBefore().toInstant() + "; peers would refuse it");
        }
    }

    /** Signs and verifies a few bytes: a key that is not the certificate's is found now, not at each handshake. */
    private static void checkPair(Path certFile, Path keyFile, PublicKey pub, PrivateKey key) {
        String alg = switch (key.getAlgorithm()) {
            case "RSA" -> "SHA256withRSA";
            case "EC", "ECDSA" -> "SHA256withECDSA";
            case "Ed25519", "EdDSA" -> "Ed25519";
            case "Ed448" -> "Ed448";
            default -> null;
        };
        if (alg == null) {
            return; // an algorithm JSSE will judge at the handshake
        }
        try {
            byte[] probe = "rbridge key check".getBytes(StandardCharsets.US_ASCII);
            Signature s = Signature.getInstance(alg);
            s.initSign(key);
            s.update(probe);
            byte[] sig = s.sign();
            Signature v = Signature.getInstance(alg);
            v.initVerify(pub);
            v.update(probe);
            if (!v.verify(sig)) {
                throw new IllegalArgumentException(keyFile + " is not the key of " + certFile);
            }
        } catch (GeneralSecurityException e) {
            throw new IllegalArgumentException(keyFile + " does not go with " + certFile + ": " + e.getMessage(), e);
        }
    }
}
