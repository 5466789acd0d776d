package dev.rbridge.nbd.server;

import dev.rbridge.nbd.protocol.Nbd;
import dev.rbridge.nbd.tls.NbdTls;
import dev.rbridge.common.tls.TestCertificates;
import dev.rbridge.nbd.tls.TlsMode;
import dev.rbridge.common.tls.X509Credentials;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * NBD_OPT_STARTTLS byte by byte, against a real server with a JSSE client: what is refused in clear when TLS is
 * required, the upgrade and the session inside it, the injection of bytes behind STARTTLS, client certificates, and the
 * credential files' errors. libnbd and qemu over TLS are in {@code TlsInteropTest}.
 */
@Timeout(60)
class StartTlsTest {
    @TempDir
    Path dir;

    private TestServer ts;

    @AfterEach
    void stop() throws IOException {
        if (ts != null) {
            ts.close();
        }
    }

    private TestServer serve(TlsMode mode, boolean verifyPeer, Path certificates) throws IOException {
        NbdTls tls = NbdTls.of(mode, X509Credentials.serverContext(certificates, verifyPeer), verifyPeer, "test");
        ts = TestServer.start(b -> b.tls(tls));
        return ts;
    }

    @Test
    void requiredTlsRefusesEveryOptionInClearAndServesNothing() throws IOException {
        TestCertificates ca = TestCertificates.authority("test CA");
        serve(TlsMode.REQUIRE, false, ca.server(dir.resolve("server")));
        try (RawClient c = RawClient.connect(ts.server).hello()) {
            assertEquals(Nbd.REP_ERR_TLS_REQD, c.option(Nbd.OPT_LIST, new byte[0]).type());
            assertEquals(Nbd.REP_ERR_TLS_REQD, c.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type());
            assertEquals(Nbd.REP_ERR_TLS_REQD, c.option(Nbd.OPT_INFO, RawClient.infoData("disk")).type());
            assertEquals(Nbd.REP_ERR_TLS_REQD, c.option(Nbd.OPT_GO, RawClient.infoData("disk")).type());
            // EXPORT_NAME has no error reply: the connection ends, and no export data came before it.
            c.sendOption(Nbd.OPT_EXPORT_NAME, "disk".getBytes());
            assertTrue(c.closedByServer());
        }
    }

    @Test
    void afterStartTlsTheSessionGoesOnInsideTlsAndMovesData() throws IOException {
        TestCertificates ca = TestCertificates.authority("test CA");
        serve(TlsMode.REQUIRE, false, ca.server(dir.resolve("server")));
        SSLContext client = TestCertificates.clientContext(ca.caOnly(dir.resolve("client")));
        try (RawClient plain = RawClient.connect(ts.server).hello(); RawClient c = plain.startTls(client)) {
            assertEquals(Nbd.REP_ERR_INVALID, c.option(Nbd.OPT_STARTTLS, new byte[0]).type(), "a second STARTTLS");
            RawClient.ExportInfo info = c.negotiate("disk", false, false);
            assertEquals(1L << 30, info.size());
            byte[] block = new byte[128 << 10];
            Arrays.fill(block, (byte) 0x5a);
            c.request(0, Nbd.CMD_WRITE, 1, 4096, block.length, block);
            c.request(0, Nbd.CMD_READ, 2, 4096, block.length, null);
            c.flush();
            assertEquals(0, c.readSimple(0).error());
            RawClient.SimpleReply read = c.readSimple(block.length);
            assertEquals(0, read.error());
            assertArrayEquals(block, read.data());
        }
    }

    @Test
    void bytesSentBehindStartTlsAreNotTakenAsIfTheyCameInsideTls() throws IOException {
        TestCertificates ca = TestCertificates.authority("test CA");
        serve(TlsMode.REQUIRE, false, ca.server(dir.resolve("server")));
        try (RawClient c = RawClient.connect(ts.server).hello()) {
            // STARTTLS and a GO in one segment: a man in the middle injecting an option ahead of the handshake
            c.out.writeLong(Nbd.OPTS_MAGIC);
            c.out.writeInt(Nbd.OPT_STARTTLS);
            c.out.writeInt(0);
            c.sendOption(Nbd.OPT_GO, RawClient.infoData("disk"));
            assertTrue(c.closedByServer(), "the server must not acknowledge STARTTLS with bytes behind it");
        }
    }

    @Test
    void offeredTlsServesPlainClientsAndTlsClients() throws IOException {
        TestCertificates ca = TestCertificates.authority("test CA");
        serve(TlsMode.ON, false, ca.server(dir.resolve("server")));
        try (RawClient c = RawClient.connect(ts.server)) {
            assertEquals(1L << 30, c.go("disk", true, false).size());
        }
        SSLContext client = TestCertificates.clientContext(ca.caOnly(dir.resolve("client")));
        try (RawClient plain = RawClient.connect(ts.server).hello(); RawClient c = plain.startTls(client)) {
            assertEquals(16L << 20, c.negotiate("small", true, false).size());
        }
    }

    @Test
    void withoutTlsStartTlsIsUnsupported() throws IOException {
        ts = TestServer.start();
        try (RawClient c = RawClient.connect(ts.server).hello()) {
            RawClient.OptionReply r = c.option(Nbd.OPT_STARTTLS, new byte[0]);
            assertEquals(Nbd.REP_ERR_UNSUP, r.type());
            assertTrue(new String(r.data()).contains("--tls"), new String(r.data()));
            assertEquals(1L << 30, c.negotiate("disk", false, false).size());
        }
    }

    @Test
    void aServerThatVerifiesPeersRefusesClientsWithoutACertificateAndServesTheOthers() throws IOException {
        TestCertificates ca = TestCertificates.authority("test CA");
        serve(TlsMode.REQUIRE, true, ca.server(dir.resolve("server")));
        SSLContext anonymous = TestCertificates.clientContext(ca.caOnly(dir.resolve("anonymous")));
        try (RawClient plain = RawClient.connect(ts.server).hello()) {
            // TLS 1.3: the client finishes its handshake before the server judges it; the refusal ends the
            // connection, which the client meets at its first read
            assertThrows(IOException.class, () -> plain.startTls(anonymous).negotiate("disk", false, false));
        }
        SSLContext stranger = TestCertificates.clientContext(
                TestCertificates.authority("another CA").client(dir.resolve("stranger")));
        try (RawClient plain = RawClient.connect(ts.server).hello()) {
            assertThrows(SSLException.class, () -> plain.startTls(stranger).negotiate("disk", false, false));
        }
        SSLContext known = TestCertificates.clientContext(ca.client(dir.resolve("known")));
        try (RawClient plain = RawClient.connect(ts.server).hello(); RawClient c = plain.startTls(known)) {
            assertEquals(1L << 30, c.negotiate("disk", false, false).size());
        }
    }

    @Test
    void aClientThatDoesNotTrustTheServerGetsNoSession() throws IOException {
        serve(TlsMode.REQUIRE, false, TestCertificates.authority("test CA").server(dir.resolve("server")));
        SSLContext other = TestCertificates.clientContext(
                TestCertificates.authority("another CA").caOnly(dir.resolve("client")));
        try (RawClient plain = RawClient.connect(ts.server).hello()) {
            assertThrows(SSLException.class, () -> plain.startTls(other));
        }
        SSLContext right = TestCertificates.clientContext(dir.resolve("server")); // its ca-cert.pem
        try (RawClient plain = RawClient.connect(ts.server).hello(); RawClient c = plain.startTls(right)) {
            assertEquals(1L << 30, c.negotiate("disk", false, false).size());
        }
    }

    @Test
    void credentialProblemsAreSaidAtStartWithTheFile() throws IOException {
        TestCertificates ca = TestCertificates.authority("test CA");
        Path expired = ca.server(dir.resolve("expired"), Instant.now().minus(Duration.ofDays(1)));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> X509Credentials.serverContext(expired, false));
        assertTrue(e.getMessage().contains("expired") && e.getMessage().contains("server-cert.pem"), e.getMessage());

        Path missing = Files.createDirectories(dir.resolve("empty"));
        e = assertThrows(IllegalArgumentException.class, () -> X509Credentials.serverContext(missing, false));
        assertTrue(e.getMessage().contains("server-cert.pem not found"), e.getMessage());

        Path mixed = ca.server(dir.resolve("mixed"));
        Path other = ca.server(dir.resolve("other"));
        Files.copy(other.resolve("server-key.pem"), mixed.resolve("server-key.pem"),
                java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        e = assertThrows(IllegalArgumentException.class, () -> X509Credentials.serverContext(mixed, false));
        assertTrue(e.getMessage().contains("is not the key of"), e.getMessage());

        Path noCa = ca.server(dir.resolve("no-ca"));
        Files.delete(noCa.resolve("ca-cert.pem"));
        X509Credentials.serverContext(noCa, false); // a CA is needed only to verify clients
        e = assertThrows(IllegalArgumentException.class, () -> X509Credentials.serverContext(noCa, true));
        assertTrue(e.getMessage().contains("ca-cert.pem not found"), e.getMessage());
    }
}
