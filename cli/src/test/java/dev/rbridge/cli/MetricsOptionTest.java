package dev.rbridge.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** The --metrics option of memserver and demo: what each counts, and how a taken address is handled. */
@Tag("interop")
class MetricsOptionTest {
    private static final Pattern LENDING = Pattern.compile("lending \\S+ at (\\S+)");
    private static final Pattern METRICS = Pattern.compile("metrics http://(\\S+)/metrics");
    private final HttpClient http = HttpClient.newHttpClient();

    @Test
    void memserverCountsRefusedPeersByReason() throws Exception {
        Path dir = Files.createTempDirectory("metrics");
        Path log = dir.resolve("memserver.log");
        Process m = CliProcess.start(log, "memserver", "--listen", "127.0.0.1:0", "--admin", "none", "--capacity",
                "256M", "--token", "s3cret", "--metrics", "127.0.0.1:0");
        try {
            String line = firstLine(m, log);
            String address = group(LENDING, line);
            String metrics = group(METRICS, line);
            assertEquals(0.0, sample(metrics, "rbridge_memserver_refused_connections_total{reason=\"token\"}"));

            Process bad = CliProcess.start(dir.resolve("ping.log"), "ping", "--server", address, "--token", "guess");
            assertTrue(bad.waitFor(60, TimeUnit.SECONDS));
            assertEquals(1, bad.exitValue());
            String[] hostPort = address.split(":");
            try (Socket s = new Socket(hostPort[0], Integer.parseInt(hostPort[1]))) {
                OutputStream out = s.getOutputStream();
                out.write(new byte[64]); // no magic: garbage where a HELLO belongs
                out.flush();
                s.getInputStream().readAllBytes(); // the memserver closes it
            }
            try (Socket s = new Socket(hostPort[0], Integer.parseInt(hostPort[1]))) {
                ByteBuffer hello = ByteBuffer.allocate(24).order(ByteOrder.LITTLE_ENDIAN);
                hello.putInt(0x4D524252).putShort((short) 99).putShort((short) 1).putLong(1).putInt(0).putInt(0);
                s.getOutputStream().write(hello.array()); // a HELLO of protocol version 99
                s.getInputStream().readAllBytes();
            }
            awaitSample(metrics, "rbridge_memserver_refused_connections_total{reason=\"token\"}", 1.0);
            awaitSample(metrics, "rbridge_memserver_refused_connections_total{reason=\"malformed\"}", 1.0);
            awaitSample(metrics, "rbridge_memserver_refused_connections_total{reason=\"version\"}", 1.0);
            assertEquals(0.0, sample(metrics, "rbridge_memserver_clients"));
            assertEquals(256.0 * 1024 * 1024, sample(metrics, "rbridge_memserver_capacity_bytes"));
        } finally {
            m.destroy();
            m.waitFor(20, TimeUnit.SECONDS);
        }
    }

    @Test
    void anExplicitTakenAddressIsAnErrorAndATakenDefaultOnlyAWarning() throws Exception {
        Path dir = Files.createTempDirectory("metrics");
        try (ServerSocket taken = new ServerSocket()) {
            taken.bind(new InetSocketAddress("127.0.0.1", 0));
            Path log = dir.resolve("explicit.log");
            Process p = CliProcess.start(log, "memserver", "--listen", "127.0.0.1:0", "--admin", "none", "--capacity",
                    "64M", "--metrics", "127.0.0.1:" + taken.getLocalPort());
            assertTrue(p.waitFor(60, TimeUnit.SECONDS));
            assertEquals(1, p.exitValue());
            String err = Files.readString(log);
            assertTrue(err.contains("cannot serve metrics on 127.0.0.1:" + taken.getLocalPort())
                    && err.contains("(use --metrics HOST:PORT or none)"), err);
        }
        ServerSocket defaultPort = new ServerSocket();
        try {
            defaultPort.bind(new InetSocketAddress("127.0.0.1", 7474));
        } catch (IOException e) {
            defaultPort.close(); // someone else holds it: the memserver below meets a taken default all the same
        }
        try (ServerSocket held = defaultPort) {
            Path log = dir.resolve("default.log");
            Process p = CliProcess.start(log, "memserver", "--listen", "127.0.0.1:0", "--admin", "none", "--capacity",
                    "64M");
            try {
                String line = firstLine(p, log);
                assertTrue(line.contains("lending") && !line.contains("metrics"), line);
                assertTrue(Files.readString(log).contains("metrics not served: the default address 127.0.0.1:7474 is"
                        + " taken"), Files.readString(log));
            } finally {
                p.destroy();
                p.waitFor(20, TimeUnit.SECONDS);
            }
        }
    }

    @Test
    void demoCountsNbdErrorsByErrnoAndMemserversApart() throws Exception {
        PeerTool.check(30, "python3", "-c", "import nbd");
        Path dir = Files.createTempDirectory("metrics");
        Path log = dir.resolve("demo.log");
        Process d = CliProcess.start(log, "demo", "--listen", "127.0.0.1:0", "--memservers", "2", "--export",
                "disk,size=64M,replicas=2", "--metrics", "127.0.0.1:0");
        try {
            BufferedReader r = new BufferedReader(new InputStreamReader(d.getInputStream(), StandardCharsets.UTF_8));
            String uri = null;
            String metrics = null;
            for (String line; (metrics == null) && (line = r.readLine()) != null;) {
                if (line.contains("serving ")) {
                    uri = line.substring(line.indexOf("nbd://"));
                }
                Matcher x = METRICS.matcher(line);
                if (x.find()) {
                    metrics = x.group(1);
                }
            }
            if (uri == null || metrics == null) {
                fail("demo printed no URI or metrics address:\n" + Files.readString(log));
            }
            PeerTool.check(60, "python3", "-c", String.join("\n",
                    "import nbd, sys",
                    "h = nbd.NBD()",
                    "h.set_strict_mode(0)  # let out-of-range requests reach the server",
                    "h.connect_uri(sys.argv[1])",
                    "h.pwrite(b'x' * 4096, 0)",
                    "for off in (64 << 20, 65 << 20):",
                    "    try:",
                    "        h.pread(4096, off)",
                    "        sys.exit('read past the end succeeded')",
                    "    except nbd.Error as e:",
                    "        assert e.errnum == 22, e",
                    "h.flush()",
                    "h.shutdown()"), uri);
            awaitSample(metrics, "rbridge_nbd_errors_total{errno=\"EINVAL\",export=\"disk\",op=\"read\"}", 2.0);
            assertEquals(2.0, sample(metrics, "rbridge_nbd_requests_total{export=\"disk\",op=\"read\"}"));
            assertEquals(1.0, sample(metrics, "rbridge_nbd_requests_total{export=\"disk\",op=\"write\"}"));
            assertEquals(1.0, sample(metrics, "rbridge_nbd_requests_total{export=\"disk\",op=\"flush\"}"));
            assertEquals(0.0, sample(metrics, "rbridge_nbd_request_bytes_total{export=\"disk\",op=\"read\"}"),
                    "failed reads moved no bytes");
            assertEquals(0.0, sample(metrics, "rbridge_nbd_requests_in_flight{export=\"disk\"}"));
            String text = get("http://" + metrics + "/metrics");
            // two in-process memservers, told apart by the memserver tag; both hold the written slab
            long regions = text.lines().filter(l -> l.startsWith("rbridge_memserver_regions{memserver=")).count();
            assertEquals(2, regions, text);
            long written = text.lines().filter(l -> l.startsWith("rbridge_transport_write_ops_total{memserver="))
                    .filter(l -> !l.endsWith(" 0.0")).count();
            assertEquals(2, written, "each memserver served writes: " + text);
        } finally {
            d.destroy();
            d.waitFor(20, TimeUnit.SECONDS);
        }
    }

    // ------------------------------------------------------------------------------------------------ helpers

    private static String firstLine(Process p, Path log) throws IOException {
        String line = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8)).readLine();
        if (line == null) {
            fail("the process printed nothing; log:\n" + Files.readString(log));
        }
        return line;
    }

    private static String group(Pattern p, String line) {
        Matcher m = p.matcher(line);
        assertTrue(m.find(), p + " in " + line);
        return m.group(1);
    }

    private String get(String url) throws Exception {
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(url)).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), url);
        return r.body();
    }

    /** The value of the exposition line that starts with {@code series} (name and labels exactly as exposed). */
    private double sample(String address, String series) throws Exception {
        String text = get("http://" + address + "/metrics");
        for (String line : text.split("\n")) {
            if (line.startsWith(series + " ")) {
                return Double.parseDouble(line.substring(series.length() + 1).trim());
            }
        }
        fail("no series " + series + " in:\n" + text);
        return Double.NaN;
    }

    private void awaitSample(String address, String series, double expected) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        double v;
        while ((v = sample(address, series)) != expected) {
            if (System.nanoTime() > deadline) {
                fail(series + " is " + v + ", expected " + expected);
            }
            Thread.sleep(100);
        }
    }
}
