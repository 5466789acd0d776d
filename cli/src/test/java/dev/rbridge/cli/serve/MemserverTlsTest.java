package dev.rbridge.cli.serve;

import dev.rbridge.cli.CliProcess;
import dev.rbridge.common.tls.TestCertificates;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The memserver wire over mutual TLS, as an operator runs it: memservers with --tls-certificates and
 * --tls-verify-peer and no token (the certificate is the credential), a bridge with --memserver-tls-certificates
 * serving data that nbdcopy writes and reads back, and ping refused in a sentence without TLS, without a client
 * certificate, and counted by reason in the memserver's metrics.
 */
@Timeout(300)
@Tag("interop")
class MemserverTlsTest {
    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    @Test
    void aBridgeServesOverMutualTlsAndClientsWithoutCertificatesAreRefused() throws Exception {
        PeerTool.require("nbdcopy", "libnbd-bin");
        Path dir = Files.createTempDirectory("memserver-tls");
        TestCertificates ca = TestCertificates.authority("rbridge memserver CA");
        Path server = ca.server(dir.resolve("server"));
        Path client = ca.client(dir.resolve("client"));
        Path caOnly = ca.caOnly(dir.resolve("ca-only"));
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("memserver-tls").memservers(2).metrics(true)
                .memserverArgs("--tls-certificates", server.toString(), "--tls-verify-peer")
                .bridgeArgs("--memserver-tls-certificates", client.toString())
                .volume("disk,size=32M,replicas=2,slab=4M").start())) {
            Path data = dir.resolve("data");
            byte[] bytes = new byte[8 << 20];
            new java.util.Random(7).nextBytes(bytes);
            Files.write(data, bytes);
            PeerTool.check(120, "nbdcopy", data.toString(), c.uri("disk"));
            Path back = dir.resolve("back");
            PeerTool.check(120, "nbdcopy", c.uri("disk"), back.toString());
            byte[] read = Files.readAllBytes(back);
            assertEquals(32 << 20, read.length);
            assertEquals(-1, java.util.Arrays.mismatch(bytes, 0, bytes.length, read, 0, bytes.length),
                    "what nbdcopy read back differs from what it wrote");
            assertEquals(-1, java.util.Arrays.mismatch(new byte[read.length - bytes.length], 0,
                    read.length - bytes.length, read, bytes.length, read.length), "never written, not zero");
            String log = c.memserver(0).process().log();
            assertTrue(log.contains("TLS with client certificates"), log);

            String address = c.memserver(0).address();
            Result ok = ping(dir, address, "--tls-certificates", client.toString());
            assertEquals(0, ok.code, ok.err);
            Result clear = ping(dir, address);
            assertEquals(1, clear.code, clear.err);
            assertTrue(clear.err.contains("speaks TLS only"), clear.err);
            Result noCertificate = ping(dir, address, "--tls-certificates", caOnly.toString());
            assertEquals(1, noCertificate.code, noCertificate.err);
            assertTrue(noCertificate.err.contains("requires a client certificate"), noCertificate.err);

            String metrics = get("http://" + c.memserver(0).metricsAddress() + "/metrics");
            assertTrue(metrics.contains("rbridge_memserver_refused_connections_total{reason=\"tls_required\"} 1"),
                    metrics);
            assertTrue(metrics.contains("rbridge_memserver_refused_connections_total{reason=\"tls_handshake\"} 1"),
                    metrics);
        }
    }

    private record Result(int code, String err) {
    }

    private static Result ping(Path dir, String address, String... more) throws Exception {
        Path log = Files.createTempFile(dir, "ping", ".log");
        java.util.List<String> args = new java.util.ArrayList<>(java.util.List.of("ping", "--server", address,
                "--count", "20", "--size", "64K", "--validate"));
        args.addAll(java.util.List.of(more));
        Process p = CliProcess.start(log, args.toArray(String[]::new));
        p.getInputStream().readAllBytes();
        assertTrue(p.waitFor(60, TimeUnit.SECONDS));
        return new Result(p.exitValue(), Files.readString(log));
    }

    private static String get(String url) throws Exception {
        HttpResponse<String> r = HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create(url)).build(),
                HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
        return r.body();
    }
}
