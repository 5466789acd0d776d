package dev.rbridge.common.tls;

import org.bouncycastle.asn1.x500.X500Name;
import org.bouncycastle.asn1.x509.BasicConstraints;
import org.bouncycastle.asn1.x509.ExtendedKeyUsage;
import org.bouncycastle.asn1.x509.Extension;
import org.bouncycastle.asn1.x509.GeneralName;
import org.bouncycastle.asn1.x509.GeneralNames;
import org.bouncycastle.asn1.x509.KeyPurposeId;
import org.bouncycastle.asn1.x509.KeyUsage;
import org.bouncycastle.cert.X509CertificateHolder;
import org.bouncycastle.cert.jcajce.JcaX509v3CertificateBuilder;
import org.bouncycastle.openssl.jcajce.JcaPEMWriter;
import org.bouncycastle.operator.jcajce.JcaContentSignerBuilder;

import java.io.IOException;
import java.io.StringWriter;
import java.io.UncheckedIOException;
import java.math.BigInteger;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.spec.ECGenParameterSpec;
import java.time.Duration;
import java.time.Instant;
import java.util.Date;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Certificates for TLS tests, made here (EC P-256, as certtool and openssl make them) and written in the directory
 * layout nbdkit, qemu and libnbd read: a CA, and directories for a server and a client under it.
 */
public final class TestCertificates {
    private static final AtomicLong SERIAL = new AtomicLong(System.currentTimeMillis());

    private final KeyPair caKey;
    private final X509CertificateHolder ca;

    private TestCertificates(String name) {
        this.caKey = keyPair();
        X500Name subject = new X500Name("CN=" + name);
        this.ca = sign(new JcaX509v3CertificateBuilder(subject, serial(), from(Instant.now().minus(Duration.ofDays(1))),
                from(Instant.now().plus(Duration.ofDays(30))), subject, caKey.getPublic()), true, null, caKey, false);
    }

    /** A new CA. */
    public static TestCertificates authority(String name) {
        return new TestCertificates(name);
    }

    /** {@code dir} with ca-cert.pem, server-cert.pem and server-key.pem for localhost and 127.0.0.1. */
    public Path server(Path dir) {
        return server(dir, Instant.now().plus(Duration.ofDays(30)));
    }

    /** As {@link #server(Path)}, valid until {@code notAfter} (in the past: an expired certificate). */
    public Path server(Path dir, Instant notAfter) {
        KeyPair key = keyPair();
        X509CertificateHolder cert = issue("CN=localhost", key, notAfter, KeyPurposeId.id_kp_serverAuth, true);
        return write(dir, "server", key, cert);
    }

    /** {@code dir} with ca-cert.pem, client-cert.pem and client-key.pem: libnbd's layout for a client. */
    public Path client(Path dir) {
        return client(dir, Instant.now().plus(Duration.ofDays(30)));
    }

    /** As {@link #client(Path)}, valid until {@code notAfter} (in the past: an expired certificate). */
    public Path client(Path dir, Instant notAfter) {
        KeyPair key = keyPair();
        X509CertificateHolder cert = issue("CN=rbridge test client", key, notAfter, KeyPurposeId.id_kp_clientAuth,
                false);
        return write(dir, "client", key, cert);
    }

    /** {@code dir} with this CA's ca-cert.pem alone: what a client needs to check a server. */
    public Path caOnly(Path dir) {
        return write(dir, null, null, null);
    }

    private X509CertificateHolder issue(String subject, KeyPair key, Instant notAfter, KeyPurposeId purpose,
            boolean hostNames) {
        JcaX509v3CertificateBuilder b = new JcaX509v3CertificateBuilder(ca.getSubject(), serial(),
                from(Instant.now().minus(Duration.ofDays(2))), from(notAfter), new X500Name(subject),
                key.getPublic());
        return sign(b, false, purpose, caKey, hostNames);
    }

    private static X509CertificateHolder sign(JcaX509v3CertificateBuilder b, boolean isCa, KeyPurposeId purpose,
            KeyPair signer, boolean hostNames) {
        try {
            b.addExtension(Extension.basicConstraints, true, new BasicConstraints(isCa));
            b.addExtension(Extension.keyUsage, true, new KeyUsage(isCa ? KeyUsage.keyCertSign | KeyUsage.cRLSign
                    : KeyUsage.digitalSignature));
            if (purpose != null) {
                b.addExtension(Extension.extendedKeyUsage, false, new ExtendedKeyUsage(purpose));
            }
            if (hostNames) {
                b.addExtension(Extension.subjectAlternativeName, false, new GeneralNames(new GeneralName[]{
                        new GeneralName(GeneralName.dNSName, "localhost"),
                        new GeneralName(GeneralName.iPAddress, "127.0.0.1")}));
            }
            return b.build(new JcaContentSignerBuilder("SHA256withECDSA").build(signer.getPrivate()));
        } catch (Exception e) {
            throw new IllegalStateException("could not make a test certificate", e);
        }
    }

    private Path write(Path dir, String role, KeyPair key, X509CertificateHolder cert) {
        try {
            Files.createDirectories(dir);
            Files.writeString(dir.resolve("ca-cert.pem"), pem(ca));
            if (role != null) {
                Files.writeString(dir.resolve(role + "-cert.pem"), pem(cert));
                Files.writeString(dir.resolve(role + "-key.pem"), sec1(key));
            }
            return dir;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static String pem(Object o) throws IOException {
        StringWriter s = new StringWriter();
        try (JcaPEMWriter w = new JcaPEMWriter(s)) {
            w.writeObject(o);
        }
        return s.toString();
    }

    /**
     * The key as openssl and certtool write an EC key: SEC1 ("EC PRIVATE KEY") with its curve and public point. (The
     * JDK's PKCS#8 form leaves the curve out of the inner structure, which GnuTLS cannot read.)
     */
    private static String sec1(KeyPair key) throws IOException {
        java.security.interfaces.ECPrivateKey priv = (java.security.interfaces.ECPrivateKey) key.getPrivate();
        org.bouncycastle.asn1.x509.SubjectPublicKeyInfo spki = org.bouncycastle.asn1.x509.SubjectPublicKeyInfo
                .getInstance(key.getPublic().getEncoded());
        org.bouncycastle.asn1.sec.ECPrivateKey sec1 = new org.bouncycastle.asn1.sec.ECPrivateKey(256, priv.getS(),
                spki.getPublicKeyData(), org.bouncycastle.asn1.sec.SECObjectIdentifiers.secp256r1);
        return pem(new org.bouncycastle.util.io.pem.PemObject("EC PRIVATE KEY", sec1.getEncoded()));
    }

    private static KeyPair keyPair() {
        try {
            KeyPairGenerator g = KeyPairGenerator.getInstance("EC");
            g.initialize(new ECGenParameterSpec("secp256r1"));
            return g.generateKeyPair();
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * A JSSE client context trusting the ca-cert.pem of {@code dir}, presenting client-cert.pem and client-key.pem
     * when the directory has them: what libnbd does with the same directory.
     */
    public static javax.net.ssl.SSLContext clientContext(Path dir) {
        try {
            // read as the server reads its own files: one PEM loader for both sides
            java.security.KeyStore trust = java.security.KeyStore.getInstance("PKCS12");
            trust.load(null, null);
            trust.setCertificateEntry("ca", X509Credentials.certificates(dir.resolve("ca-cert.pem")).getFirst());
            javax.net.ssl.TrustManagerFactory tmf = javax.net.ssl.TrustManagerFactory.getInstance("PKIX");
            tmf.init(trust);
            javax.net.ssl.KeyManager[] keys = null;
            if (Files.exists(dir.resolve("client-cert.pem"))) {
                java.security.KeyStore ks = java.security.KeyStore.getInstance("PKCS12");
                ks.load(null, null);
                ks.setKeyEntry("client", X509Credentials.privateKey(dir.resolve("client-key.pem")), new char[0],
                        X509Credentials.certificates(dir.resolve("client-cert.pem"))
                                .toArray(java.security.cert.Certificate[]::new));
                javax.net.ssl.KeyManagerFactory kmf = javax.net.ssl.KeyManagerFactory.getInstance("PKIX");
                kmf.init(ks, new char[0]);
                keys = kmf.getKeyManagers();
            }
            javax.net.ssl.SSLContext c = javax.net.ssl.SSLContext.getInstance("TLS");
            c.init(keys, tmf.getTrustManagers(), null);
            return c;
        } catch (Exception e) {
            throw new IllegalStateException("could not make a client TLS context from " + dir, e);
        }
    }

    private static BigInteger serial() {
        return BigInteger.valueOf(SERIAL.incrementAndGet());
    }

    private static Date from(Instant i) {
        return Date.from(i);
    }
}
