package dev.rbridge.nbd.interop;

import dev.rbridge.nbd.server.TestServer;
import dev.rbridge.nbd.tls.NbdTls;
import dev.rbridge.nbd.tls.PskKeys;
import dev.rbridge.common.tls.TestCertificates;
import dev.rbridge.nbd.tls.TlsMode;
import dev.rbridge.common.tls.X509Credentials;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * NBD over TLS with the real clients: libnbd (nbdinfo, nbdcopy), qemu-img and qemu-io with a {@code tls-creds-x509}
 * object, fio's nbd engine on an {@code nbds://} URI; and what each is refused: a plain client where TLS is required,
 * a client that does not trust the server's CA, a client without a certificate, or with an expired one, where the
 * server verifies peers. After each refusal the server goes on serving the next client.
 */
@Tag("interop")
@Timeout(600)
class TlsInteropTest {
    static Path pki;
    static TestCertificates ca;
    /** TLS required; any client trusting the CA. */
    static TestServer required;
    /** TLS required and client certificates verified. */
    static TestServer verifying;
    /** TLS-PSK required: alice's key. */
    static TestServer psk;

    @BeforeAll
    static void start() throws IOException {
        PeerTool.require("nbdinfo", "libnbd-bin");
        PeerTool.require("nbdcopy", "libnbd-bin");
        PeerTool.require("qemu-io", "qemu-utils");
        PeerTool.require("qemu-img", "qemu-utils");
        PeerTool.require("fio", "fio");
        pki = Files.createTempDirectory("rbridge-tls");
        ca = TestCertificates.authority("rbridge interop CA");
        Path server = ca.server(pki.resolve("server"));
        required = TestServer.start(b -> b.tls(NbdTls.of(TlsMode.REQUIRE, X509Credentials.serverContext(server,
                false), false, "test")));
        verifying = TestServer.start(b -> b.tls(NbdTls.of(TlsMode.REQUIRE, X509Credentials.serverContext(server,
                true), true, "test")));
        ca.client(pki.resolve("client"));
        ca.caOnly(pki.resolve("anonymous"));
        ca.client(pki.resolve("expired"), Instant.now().minus(Duration.ofDays(1)));
        TestCertificates.authority("another CA").client(pki.resolve("stranger"));
        // psktool's format; qemu reads keys.psk from a directory
        Files.createDirectories(pki.resolve("psk"));
        Files.writeString(pki.resolve("psk/keys.psk"), "alice:" + hex(32) + "\n");
        Files.createDirectories(pki.resolve("wrong-psk"));
        Files.writeString(pki.resolve("wrong-psk/keys.psk"), "alice:" + hex(32) + "\n");
        Files.writeString(pki.resolve("bob.psk"), "bob:" + hex(32) + "\n");
        psk = TestServer.start(b -> b.tls(NbdTls.psk(TlsMode.REQUIRE, PskKeys.read(pki.resolve("psk/keys.psk")))));
    }

    private static String hex(int bytes) {
        byte[] b = new byte[bytes];
        new java.security.SecureRandom().nextBytes(b);
        return java.util.HexFormat.of().formatHex(b);
    }

    /** libnbd takes the PSK identity from the URI's user part. */
    private static String nbdsPsk(String user, String file) {
        return "nbds://" + user + "@127.0.0.1:" + psk.port() + "/disk?tls-psk-file=" + pki.resolve(file);
    }

    @Test
    void pskClientsOfLibnbdAndQemuGetIn() {
        assertEquals("1073741824", PeerTool.check(60, "nbdinfo", "--size", nbdsPsk("alice", "psk/keys.psk")).trim());
        PeerTool.script(300, "nbdcopy_roundtrip.sh", nbdsPsk("alice", "psk/keys.psk"), "32");
        String creds = "tls-creds-psk,id=tls0,endpoint=client,username=alice,dir=" + pki.resolve("psk");
        String image = "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port=" + psk.port()
                + ",export=disk,tls-creds=tls0";
        String out = PeerTool.check(120, "qemu-io", "--object", creds, "--image-opts", image,
                "-c", "write -P 0x3c 8M 1M", "-c", "read -P 0x3c 8M 1M");
        assertTrue(out.contains("read 1048576/1048576"), out);
    }

    @Test
    void aWrongPskOrAnUnknownIdentityIsRefused() {
        PeerTool.Result wrong = PeerTool.run(60, List.of("nbdinfo", "--size", nbdsPsk("alice", "wrong-psk/keys.psk")));
        assertNotEquals(0, wrong.exitCode(), wrong.output());
        PeerTool.Result unknown = PeerTool.run(60, List.of("nbdinfo", "--size", nbdsPsk("bob", "bob.psk")));
        assertNotEquals(0, unknown.exitCode(), unknown.output());
        PeerTool.Result plain = PeerTool.run(60, List.of("nbdinfo", "--list", "nbd://127.0.0.1:" + psk.port() + "/"));
        assertNotEquals(0, plain.exitCode(), plain.output());
        assertEquals("1073741824", PeerTool.check(60, "nbdinfo", "--size", nbdsPsk("alice", "psk/keys.psk")).trim());
    }

    @AfterAll
    static void stop() throws IOException {
        for (TestServer t : new TestServer[]{required, verifying, psk}) {
            if (t != null) {
                t.close();
            }
        }
    }

    /** The nbds:// URI of {@code export} on {@code ts}, with the client's certificate directory. */
    private static String nbds(TestServer ts, String export, String clientDir) {
        return "nbds://127.0.0.1:" + ts.port() + "/" + export + "?tls-certificates=" + pki.resolve(clientDir);
    }

    private static void stillServes(TestServer ts) {
        String size = PeerTool.check(60, "nbdinfo", "--size", nbds(ts, "disk", "client")).trim();
        assertEquals("1073741824", size);
    }

    @Test
    void libnbdListsDescribesAndCopiesOverTls() {
        String list = PeerTool.check(60, "nbdinfo", "--list", nbds(required, "", "anonymous"));
        assertTrue(list.contains("export=\"disk\"") && list.contains("export=\"ro\""), list);
        String json = PeerTool.check(60, "nbdinfo", "--json", nbds(required, "disk", "anonymous"));
        assertTrue(json.contains("\"export-size\": 1073741824"), json);
        PeerTool.script(300, "nbdcopy_roundtrip.sh", nbds(required, "disk", "anonymous"), "64");
    }

    @Test
    void qemuWritesAndReadsBackThroughTlsCredentials() {
        String creds = "tls-creds-x509,id=tls0,endpoint=client,dir=" + pki.resolve("client");
        String image = "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port=" + verifying.port()
                + ",export=disk,tls-creds=tls0";
        String out = PeerTool.check(120, "qemu-io", "--object", creds, "--image-opts", image,
                "-c", "write -P 0x5a 1M 3M", "-c", "read -P 0x5a 1M 3M", "-c", "read -P 0 0 1M");
        assertTrue(out.contains("wrote 3145728/3145728"), out);
        String info = PeerTool.check(60, "qemu-img", "info", "--object", creds, "--image-opts", image);
        assertTrue(info.contains("virtual size: 1 GiB"), info);
    }

    /**
     * fio's nbd engine refuses URIs that name local files (tls-certificates), so it cannot be told our test CA: it
     * runs encrypted without checking the server's certificate (tls-verify-peer=false), the only way it can here.
     */
    @Test
    void fioVerifiesOverAnNbdsUri() {
        PeerTool.check(300, "fio", "--name=tls", "--ioengine=nbd", "--uri=nbds://127.0.0.1:" + required.port()
                + "/disk?tls-verify-peer=false",
                "--rw=randwrite", "--bs=4k", "--size=16M", "--iodepth=16", "--verify=crc32c", "--do_verify=1",
                "--verify_fatal=1", "--verify_state_save=0");
    }

    @Test
    void aPlainClientWhereTlsIsRequiredGetsNothing() {
        PeerTool.Result list = PeerTool.run(60, List.of("nbdinfo", "--list",
                "nbd://127.0.0.1:" + required.port() + "/"));
        assertNotEquals(0, list.exitCode(), list.output());
        assertTrue(!list.output().contains("export=\"disk\""), list.output());
        PeerTool.Result go = PeerTool.run(60, List.of("nbdinfo", "nbd://127.0.0.1:" + required.port() + "/disk"));
        assertNotEquals(0, go.exitCode(), go.output());
        stillServes(required);
    }

    @Test
    void aClientThatDoesNotTrustTheServersCaIsRefused() {
        PeerTool.Result r = PeerTool.run(60, List.of("nbdinfo", "--size", nbds(required, "disk", "stranger")));
        assertNotEquals(0, r.exitCode(), r.output());
        assertTrue(r.output().toLowerCase().contains("certificate"), r.output());
        stillServes(required);
    }

    @Test
    void whereClientsAreVerifiedOnlyACurrentCertificateFromTheCaGetsIn() {
        for (String dir : new String[]{"anonymous", "stranger", "expired"}) {
            PeerTool.Result r = PeerTool.run(60, List.of("nbdinfo", "--size", nbds(verifying, "disk", dir)));
            assertNotEquals(0, r.exitCode(), dir + ": " + r.output());
        }
        stillServes(verifying);
    }
}
