package dev.rbridge.cli;

import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code rbridge memserver} and {@code rbridge ping} as separate processes, as an operator runs them. */
@Timeout(120)
@Tag("interop")
class RemoteMemoryCommandsTest {
    private static final Pattern LENDING = Pattern.compile("lending \\S+ at (\\S+)");

    @Test
    void pingValidatesAgainstAMemserverProcessAndAWrongTokenIsRefused() throws Exception {
        Path dir = Files.createTempDirectory("memserver");
        Path tokenFile = Files.writeString(dir.resolve("token"), "t0ken\n");
        Path log = dir.resolve("memserver.log");
        Process m = CliProcess.start(log, "memserver", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
                "--capacity", "256M",
                "--token-file", tokenFile.toString());
        try {
            String line = new BufferedReader(new InputStreamReader(m.getInputStream(), StandardCharsets.UTF_8))
                    .readLine();
            assertTrue(line != null, "memserver printed nothing; log:\n" + Files.readString(log));
            Matcher matcher = LENDING.matcher(line);
            assertTrue(matcher.find(), line);
            String address = matcher.group(1);

            Path pingLog = dir.resolve("ping.log");
            Process ok = CliProcess.start(pingLog, "ping", "--server", address, "--token", "t0ken", "--count", "50",
                    "--size", "64K", "--validate");
            String out = new String(ok.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(ok.waitFor(60, TimeUnit.SECONDS));
            assertEquals(0, ok.exitValue(), out + Files.readString(pingLog));
            assertTrue(out.contains("50 rounds of 65536 bytes, all validated"), out);

            // Latency both ways replies can be read (the caller itself, the default; the reader thread).
            for (String[] run : new String[][]{{"read-lat", "--iters", "500", "--completion", "caller"},
                    {"write-lat", "--iters", "500", "--completion", "thread"},
                    {"write-bw", "--time", "1", "--completion", "caller"}}) {
                Process bench = CliProcess.start(pingLog, "bench", "--server", address, "--token", "t0ken", "--test",
                        run[0], "--size", "4K", "--tx-depth", "8", run[1], run[2], run[3], run[4]);
                String table = new String(bench.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
                assertTrue(bench.waitFor(60, TimeUnit.SECONDS));
                assertEquals(0, bench.exitValue(), table + Files.readString(pingLog));
                assertTrue(table.contains(run[0].endsWith("lat") ? "t_typical[usec]" : "BW average[MB/sec]"), table);
                assertTrue(table.lines().anyMatch(l -> l.trim().startsWith("4096 ")), "a result row: " + table);
            }

            // --json: one object a script can read.
            for (String[] run : new String[][]{{"ping", "--count", "20", "--json"},
                    {"bench", "--test", "read-lat", "--iters", "200", "--json"},
                    {"bench", "--test", "write-bw", "--time", "1", "--json"}}) {
                java.util.List<String> args = new java.util.ArrayList<>(java.util.List.of(run[0], "--server", address,
                        "--token", "t0ken"));
                args.addAll(java.util.List.of(run).subList(1, run.length));
                Process p = CliProcess.start(pingLog, args.toArray(String[]::new));
                String text = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
                assertTrue(p.waitFor(60, TimeUnit.SECONDS));
                assertEquals(0, p.exitValue(), text + Files.readString(pingLog));
                Object parsed = dev.rbridge.cli.serve.ServeCluster.Json.parse(text);
                assertTrue(parsed instanceof java.util.Map<?, ?> answer && (answer.containsKey("rtt_us")
                        || answer.containsKey("t_typical_us") || answer.containsKey("bw_average_mb_s")), text);
            }

            Process badMode = CliProcess.start(pingLog, "bench", "--server", address, "--token", "t0ken", "--test",
                    "read-lat", "--completion", "sometimes");
            assertTrue(badMode.waitFor(60, TimeUnit.SECONDS));
            assertEquals(2, badMode.exitValue(), Files.readString(pingLog));
            assertTrue(Files.readString(pingLog).contains("--completion must be caller or thread: sometimes"),
                    Files.readString(pingLog));

            Process bad = CliProcess.start(pingLog, "ping", "--server", address, "--token", "guess");
            assertTrue(bad.waitFor(60, TimeUnit.SECONDS));
            assertEquals(1, bad.exitValue());
            assertTrue(Files.readString(pingLog).contains("wrong token"), Files.readString(pingLog));
            assertTrue(Files.readString(log).contains("refused client 'rbridge-ping'"), Files.readString(log));

            m.destroy();
            assertTrue(m.waitFor(30, TimeUnit.SECONDS), "memserver did not stop on SIGTERM");
            assertTrue(Files.readString(log).contains("stopped"), Files.readString(log));
        } finally {
            m.destroyForcibly();
        }
    }

    @Test
    void memserverRefusesBadSettingsWithOneSentence() throws Exception {
        Path log = Files.createTempFile("memserver", ".log");
        Process p = CliProcess.start(log, "memserver", "--capacity", "lots");
        assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        assertEquals(2, p.exitValue());
        assertTrue(Files.readString(log).contains("'lots' is not a size"), Files.readString(log));
        Process q = CliProcess.start(log, "memserver", "--capacity", "1G", "--transport", "carrier-pigeon");
        assertTrue(q.waitFor(30, TimeUnit.SECONDS));
        assertEquals(2, q.exitValue());
        assertTrue(Files.readString(log).contains("unknown transport 'carrier-pigeon' (available: tcp, local, ucx)"),
                Files.readString(log));
        Process r = CliProcess.start(log, "memserver", "--admin", "none");
        assertTrue(r.waitFor(30, TimeUnit.SECONDS));
        assertEquals(2, r.exitValue());
        assertTrue(Files.readString(log).contains("give --capacity SIZE"), Files.readString(log));
    }

    /** A memserver takes its options from --config FILE as serve does; the command line adds to it. */
    @Test
    void memserverReadsAConfigFile() throws Exception {
        Path dir = Files.createTempDirectory("memserver-config");
        Path config = Files.writeString(dir.resolve("memserver.conf"), "# lend a little\nlisten = 127.0.0.1:0\n"
                + "capacity = 96M\nadmin = none\n");
        Process m = CliProcess.start(dir.resolve("memserver.log"), "memserver", "--config", config.toString(),
                "--metrics", "none");
        try {
            String line = new BufferedReader(new InputStreamReader(m.getInputStream(), StandardCharsets.UTF_8))
                    .readLine();
            assertTrue(line != null && line.contains("lending 96MiB at 127.0.0.1:"), line + "\n"
                    + Files.readString(dir.resolve("memserver.log")));
        } finally {
            m.destroy();
            assertTrue(m.waitFor(30, TimeUnit.SECONDS));
        }
        assertEquals(0, m.exitValue(), "stopped with SIGTERM: a success");
    }
}
