package dev.rbridge.cli;

import dev.rbridge.common.tls.TestCertificates;
import dev.rbridge.nbd.server.NbdServerConfig;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

import javax.net.ssl.SSLSession;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * An NBD connection that asks for STARTTLS gets its TLS buffers (about 215 KiB of direct memory with X.509: four
 * records in, eight out, a record's plaintext) as soon as the option is acknowledged, before any certificate or key is
 * checked, so every connection slot may hold them. The direct memory the connection limit is sized with counts them
 * when TLS is on: the payload budget and the connections' buffers together fit in the JVM's direct memory, and a
 * --nbd-memory that does not leave room for them is refused. (They were left out: 5000 TLS connections could hold
 * 1 GiB that nothing had budgeted.)
 */
class TlsConnectionMemoryTest {
    /** As NbdServerOptions: what neither payloads nor connections use (memserver links, the JDK's own). */
    private static final long DIRECT_BASE = 64L << 20;
    private static final long MIB = 1 << 20;
    private static final dev.rbridge.nbd.server.ListenAddress LISTEN =
            new dev.rbridge.nbd.server.ListenAddress.Tcp("127.0.0.1", 0);
    private static final dev.rbridge.nbd.server.Export EXPORT =
            dev.rbridge.nbd.server.Export.of("disk", new dev.rbridge.nbd.device.SparseMemoryDevice(1 << 20));

    private static BridgeProcessOptions serve(String... args) {
        ServeCommand c = new ServeCommand();
        new CommandLine(c).parseArgs(args);
        return c.process;
    }

    private static long maxDirect() {
        return Long.parseLong(ManagementFactory.getPlatformMXBean(com.sun.management.HotSpotDiagnosticMXBean.class)
                .getVMOption("MaxDirectMemorySize").getValue());
    }

    /** What TlsWire allocates for a connection with {@code s}: 4 records in, 8 out, one record's plaintext. */
    private static long tlsBytes(SSLSession s) {
        return (long) s.getPacketBufferSize() * (4 + 8) + s.getApplicationBufferSize();
    }

    @Test
    void tlsBuffersComeOutOfTheDirectMemoryTheConnectionLimitIsSizedWith() throws Exception {
        long direct = maxDirect();
        assertEquals(2L << 30, direct, "the build runs tests with -XX:MaxDirectMemorySize=2g");
        Path dir = Files.createTempDirectory("tls-memory");
        Path certificates = TestCertificates.authority("tls memory CA").server(dir.resolve("server"));
        String[] tls = {"--memserver", "127.0.0.1:1", "--volume", "disk,size=1G", "--tls", "on",
                "--tls-certificates", certificates.toString()};

        BridgeProcessOptions p = serve(concat(tls, "--max-connections", "5000"));
        long perConnection = NbdServerConfig.DIRECT_BYTES_PER_CONNECTION
                + tlsBytes(p.tls.settings().newEngine().getSession());
        assertTrue(perConnection > 300 << 10, "a TLS connection's buffers: " + perConnection);
        NbdServerConfig config =
                p.limits.apply(NbdServerConfig.builder().tls(p.tls.settings())).listen(LISTEN).export(EXPORT).build();
        long needed = config.payloadBudget() + config.payloadBudget() / 4 + DIRECT_BASE + 5000 * perConnection;
        assertTrue(needed <= direct, "5000 TLS connections and a payload budget of " + config.payloadBudget() / MIB
                + " MiB need " + needed / MIB + " MiB of direct memory, the JVM has " + direct / MIB);

        BridgeProcessOptions tight = serve(concat(tls, "--max-connections", "4096", "--nbd-memory", "512M"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> tight.limits.apply(NbdServerConfig.builder().tls(tight.tls.settings())));
        assertTrue(e.getMessage().contains("--nbd-memory 512M") && e.getMessage().contains("TLS"), e.getMessage());

        // Without TLS the same limits fit as before.
        BridgeProcessOptions plain = serve("--memserver", "127.0.0.1:1", "--volume", "disk,size=1G",
                "--max-connections", "4096", "--nbd-memory", "512M");
        assertEquals(512 * MIB,
                plain.limits.apply(NbdServerConfig.builder()).listen(LISTEN).export(EXPORT).build().payloadBudget());
    }

    private static String[] concat(String[] a, String... b) {
        String[] all = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, all, a.length, b.length);
        return all;
    }
}
