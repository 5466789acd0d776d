package dev.rbridge.cli;

import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code rbridge demo} as a real process: it serves real clients and stops gracefully on SIGTERM. */
@Timeout(120)
@Tag("interop")
class DemoCommandTest {
    private static final Pattern SERVING = Pattern.compile("rbridge demo: serving (\\S+)");

    private static Process rbridge(Path log, String... args) throws IOException {
        return CliProcess.start(log, args);
    }

    /** The first URI demo says it serves ({@code rbridge demo: serving URI}); the log when it says nothing. */
    private static String firstServing(Process p, Path log) throws IOException {
        String line = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8)).readLine();
        Matcher m = SERVING.matcher(String.valueOf(line));
        assertTrue(m.find(), line + "\n" + Files.readString(log));
        return m.group(1);
    }

    @Test
    void servesRealClientsOnTcpAndUnixThenStopsOnSigterm() throws Exception {
        Path dir = Files.createTempDirectory("demo");
        Path log = dir.resolve("demo.log");
        Path sock = dir.resolve("rb.sock");
        Process p = rbridge(log, "demo", "--listen", "127.0.0.1:0", "--unix", sock.toString(),
                "--export", "disk", "--export", "iso,size=64M,ro,description=install image", "--size", "256M");
        try {
            BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
            List<String> uris = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                String line = out.readLine();
                assertTrue(line != null, "demo printed nothing; log:\n" + Files.readString(log));
                Matcher m = SERVING.matcher(line);
                assertTrue(m.find(), line);
                uris.add(m.group(1));
            }
            assertTrue(uris.get(0).startsWith("nbd://127.0.0.1:"), uris.toString());
            assertTrue(uris.get(1).startsWith("nbd+unix:///disk?socket="), uris.toString());

            String size = PeerTool.check(60, "nbdinfo", "--size", uris.get(0));
            assertEquals(String.valueOf(256 << 20), size.trim());
            String list = PeerTool.check(60, "nbdinfo", "--list", uris.get(1));
            assertTrue(list.contains("export=\"iso\"") && list.contains("install image")
                    && list.contains("is_read_only: true"), list);
            PeerTool.check(60, "nbdsh", "-u", uris.get(0), "-c",
                    "h.pwrite(b'rbridge' * 1000, 4096); assert h.pread(7000, 4096) == b'rbridge' * 1000");

            p.destroy(); // SIGTERM
            assertTrue(p.waitFor(30, TimeUnit.SECONDS), "demo did not stop on SIGTERM");
            String text = Files.readString(log);
            assertTrue(text.contains("shutting down") && text.contains("shut down"), text);
            assertTrue(!Files.exists(sock), "the Unix socket is removed on shutdown");
        } finally {
            p.destroyForcibly();
        }
    }

    /**
     * Writes of every size from 4K to 1M, first into new slabs and then over written ones: fio writes them with
     * checksums twice over the same range and verifies them, nbdcopy round-trips an image over the written export, and
     * a write to a read-only export that reaches the server (libnbd's own checks off) is refused and leaves it unchanged.
     */
    @Test
    void writesOverWrittenSlabsVerifyAndAReadOnlyExportRefusesWrites() throws Exception {
        PeerTool.require("fio", "fio");
        Path dir = Files.createTempDirectory("demo-direct");
        Path log = dir.resolve("demo.log");
        Process p = rbridge(log, "demo", "--listen", "127.0.0.1:0", "--export", "disk,size=64M,slab=4M",
                "--export", "iso,size=8M,ro");
        try {
            String first = firstServing(p, log);
            String base = first.substring(0, first.lastIndexOf('/') + 1);
            for (int pass = 1; pass <= 2; pass++) {
                PeerTool.Result fio = PeerTool.run(180, List.of("fio", "--name=direct" + pass, "--ioengine=nbd",
                        "--uri=" + base + "disk", "--rw=randwrite", "--bsrange=4k-1m", "--iodepth=8", "--size=64M",
                        "--randrepeat=0", "--verify=crc32c", "--do_verify=1", "--verify_fatal=1",
                        "--verify_state_save=0"));
                assertEquals(0, fio.exitCode(), "pass " + pass + ":\n" + fio.output());
                assertTrue(!fio.output().contains("verify: bad"), fio.output());
            }
            byte[] data = new byte[64 << 20];
            new Random(7).nextBytes(data);
            Path image = Files.write(dir.resolve("image"), data);
            PeerTool.check(120, "nbdcopy", image.toString(), base + "disk");
            Path back = dir.resolve("back");
            PeerTool.check(120, "nbdcopy", base + "disk", back.toString());
            assertTrue(Arrays.equals(data, Files.readAllBytes(back)), "nbdcopy round trip over written slabs");

            // libnbd would refuse this itself; with its checks off the request reaches the server.
            String refused = PeerTool.check(60, "nbdsh", "-u", base + "iso", "-c", String.join("\n",
                    "h.set_strict_mode(0)",
                    "try:",
                    "    h.pwrite(b'x' * 65536, 0)",
                    "    print('written')",
                    "except nbd.Error as e:",
                    "    print('refused', e)"));
            assertTrue(refused.contains("refused"), refused);
            String still = PeerTool.check(60, "nbdsh", "-u", base + "iso", "-c", "print(h.pread(4, 0))");
            assertTrue(still.contains("\\x00\\x00\\x00\\x00"), still);
        } finally {
            p.destroy();
            p.waitFor(30, TimeUnit.SECONDS);
            p.destroyForcibly();
        }
    }

    @Test
    void everyByteOfEveryExportCanBeWrittenWithTwoReplicas() throws Exception {
        Path dir = Files.createTempDirectory("demo-full");
        Path log = dir.resolve("demo.log");
        Process p = rbridge(log, "demo", "--listen", "127.0.0.1:0", "--memservers", "2",
                "--export", "a,size=24M,replicas=2,slab=4M", "--export", "b,size=8M,replicas=2");
        try {
            String first = firstServing(p, log);
            String base = first.substring(0, first.lastIndexOf('/') + 1);
            for (String export : List.of("a", "b")) {
                Path image = dir.resolve(export + ".img");
                int size = export.equals("a") ? 24 << 20 : 8 << 20;
                byte[] data = new byte[size];
                new Random(export.hashCode()).nextBytes(data);
                Files.write(image, data);
                PeerTool.check(60, "nbdcopy", image.toString(), base + export);
                Path back = dir.resolve(export + ".back");
                PeerTool.check(60, "nbdcopy", base + export, back.toString());
                assertTrue(Arrays.equals(data, Files.readAllBytes(back)), "export " + export + " round trip");
            }
        } finally {
            p.destroy();
            p.waitFor(30, TimeUnit.SECONDS);
            p.destroyForcibly();
        }
    }

    @Test
    void tlsRequiredWithPskServesKeyHoldersAndNobodyInClear() throws Exception {
        Path dir = Files.createTempDirectory("demo-tls");
        Path log = dir.resolve("demo.log");
        Path keys = dir.resolve("keys.psk");
        Files.writeString(keys, "alice:" + "5a".repeat(32) + "\n");
        Files.setPosixFilePermissions(keys, java.nio.file.attribute.PosixFilePermissions.fromString("rw-------"));
        Process p = rbridge(log, "demo", "--listen", "127.0.0.1:0", "--size", "64M", "--tls", "require",
                "--tls-psk", keys.toString());
        try {
            String uri = firstServing(p, log);
            assertTrue(uri.startsWith("nbds://127.0.0.1:"), uri);
            String withKey = uri.replace("nbds://", "nbds://alice@") + "?tls-psk-file=" + keys;
            assertEquals(String.valueOf(64 << 20), PeerTool.check(60, "nbdinfo", "--size", withKey).trim());
            PeerTool.Result plain = PeerTool.run(60, List.of("nbdinfo", "--size", uri.replace("nbds://", "nbd://")));
            assertTrue(plain.exitCode() != 0, plain.output());
            assertTrue(Files.readString(log).contains("TLS: require (PSK from " + keys + ")"), Files.readString(log));
        } finally {
            p.destroy();
            p.waitFor(30, TimeUnit.SECONDS);
            p.destroyForcibly();
        }
    }

    @Test
    void tlsFlagsThatCannotWorkAreRefusedWithOneSentence() throws Exception {
        Path log = Files.createTempFile("demo-tls", ".log");
        Process p = rbridge(log, "demo", "--tls", "require");
        assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        assertEquals(2, p.exitValue());
        assertTrue(Files.readString(log).contains("--tls require needs --tls-certificates DIR"),
                Files.readString(log));

        Process q = rbridge(log, "demo", "--tls", "on", "--tls-psk", "/nonexistent/keys.psk");
        assertTrue(q.waitFor(30, TimeUnit.SECONDS));
        assertEquals(2, q.exitValue());
        assertTrue(Files.readString(log).contains("/nonexistent/keys.psk not found"), Files.readString(log));

        Process r = rbridge(log, "demo", "--tls", "maybe");
        assertTrue(r.waitFor(30, TimeUnit.SECONDS));
        assertEquals(2, r.exitValue());
        assertTrue(Files.readString(log).contains("--tls must be off, on or require"), Files.readString(log));
    }

    @Test
    void badArgumentsGetOneClearSentenceAndExitCode2() throws Exception {
        Path log = Files.createTempFile("demo", ".log");
        Process p = rbridge(log, "demo", "--size", "banana");
        assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        assertEquals(2, p.exitValue());
        assertTrue(Files.readString(log).contains("'banana' is not a size"), Files.readString(log));

        Process q = rbridge(log, "demo", "--export", "disk,colour=blue");
        assertTrue(q.waitFor(30, TimeUnit.SECONDS));
        assertEquals(2, q.exitValue());
        assertTrue(Files.readString(log).contains("unknown export attribute 'colour'"), Files.readString(log));
    }

    @Test
    void aPortInUseIsReportedNotIgnored() throws Exception {
        try (var blocker = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            Path log = Files.createTempFile("demo", ".log");
            Process p = rbridge(log, "demo", "--listen", "127.0.0.1:" + blocker.getLocalPort());
            assertTrue(p.waitFor(30, TimeUnit.SECONDS));
            assertEquals(1, p.exitValue());
            assertTrue(Files.readString(log).contains("cannot listen on 127.0.0.1:" + blocker.getLocalPort()),
                    Files.readString(log));
        }
    }

    @Test
    void helpExplainsEveryOption() {
        StringWriter sw = new StringWriter();
        picocli.CommandLine cl = Main.commandLine();
        cl.setOut(new PrintWriter(sw));
        assertEquals(0, cl.execute("demo", "--help"));
        String help = sw.toString();
        for (String option : new String[]{"--listen", "--unix", "--export", "--size", "--max-payload",
                "--handshake-timeout", "--drain-timeout", "--log-level"}) {
            assertTrue(help.contains(option), option + " missing from help:\n" + help);
        }
    }

    @Test
    void sizesParseBinaryUnits() {
        assertEquals(1L << 30, Sizes.parse("1G"));
        assertEquals(1L << 30, Sizes.parse("1GiB"));
        assertEquals(512L << 20, Sizes.parse("512m"));
        assertEquals(4096, Sizes.parse("4096"));
        assertEquals(64L << 10, Sizes.parse("64K"));
        assertEquals("1GiB", Sizes.format(1L << 30));
        Assertions.assertThrows(IllegalArgumentException.class, () -> Sizes.parse("-1G"));
        Assertions.assertThrows(IllegalArgumentException.class, () -> Sizes.parse("99999999T"));
    }

    /**
     * Every TCP socket of a demo process, the NBD connection it accepted and both ends of its tcp-transport memserver
     * link, runs the congestion control asked for, as the kernel reports it to iproute2's ss.
     */
    @Test
    void itsNbdAndMemserverSocketsRunTheChosenCongestionControl() throws Exception {
        Path dir = Files.createTempDirectory("demo-cc");
        Path log = dir.resolve("demo.log");
        // one the host does not use by default, so that a socket left alone is seen
        String chosen = Files.readString(Path.of("/proc/sys/net/ipv4/tcp_congestion_control")).strip().equals("reno")
                ? "cubic"
                : "reno";
        Process p = rbridge(log, "demo", "--listen", "127.0.0.1:0", "--transport", "tcp", "--tcp-congestion", chosen,
                "--size", "64M");
        try {
            URI uri = URI.create(firstServing(p, log));
            try (Socket nbd = new Socket(uri.getHost(), uri.getPort())) {
                assertEquals(0x4e42444d, new DataInputStream(nbd.getInputStream()).readInt(),
                        "NBDMAGIC: the server has accepted and greeted the connection");
                Process ss = new ProcessBuilder("ss", "-tinpH", "state", "established").redirectErrorStream(true)
                        .start();
                List<String> lines = new String(ss.getInputStream().readAllBytes(), StandardCharsets.UTF_8).lines()
                        .toList();
                assertEquals(0, ss.waitFor());
                List<String> algorithms = new ArrayList<>();
                for (int i = 0; i + 1 < lines.size(); i++) {
                    if (lines.get(i).contains("pid=" + p.pid() + ",")) {
                        algorithms.add(lines.get(i + 1).strip().split("\\s+")[0]);
                    }
                }
                // the accepted NBD socket, and the bridge's and the memserver's ends of the memserver link
                assertTrue(algorithms.size() >= 3,
                        "sockets of the demo: " + algorithms + "\n" + String.join("\n", lines));
                assertEquals(List.of(chosen), algorithms.stream().distinct().toList(), String.join("\n", lines));
            }
        } finally {
            p.destroyForcibly();
        }
    }
}
