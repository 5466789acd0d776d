package dev.rbridge.cli.faults;

import dev.rbridge.cli.Main;
import dev.rbridge.cli.serve.ServeCluster;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A second {@code rbridge serve} over a {@link ServeCluster}'s memservers, as a second host taking a volume over runs
 * it: its own NBD and admin ports, its output in the cluster's log folder (so {@link ServeCluster#logs()} shows it).
 * Unlike {@link ServeCluster#startRivalBridge} it can be stopped on its own with SIGTERM, which gives its leases
 * back, and its admin interface shows when it has resynchronized what it took over. It is not retried: a start
 * refused because the volume is "in use by another bridge" fails. A JVM shutdown hook kills whatever a test left
 * running.
 */
final class TakeoverBridge implements AutoCloseable {
    private static final Pattern SERVING = Pattern.compile("rbridge serve: serving (\\S+)");
    private static final Pattern ADMIN = Pattern.compile("rbridge serve: admin http://([^/\\s]+)/");
    private static final Set<Process> LIVE = ConcurrentHashMap.newKeySet();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> LIVE.forEach(Process::destroyForcibly),
                "takeover-bridge-reaper"));
    }

    private final Process process;
    private final Path out;
    private final Path log;
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    private String uriPrefix;
    private String admin;

    private TakeoverBridge(Process process, Path out, Path log) {
        this.process = process;
        this.out = out;
        this.log = log;
    }

    /**
     * Starts {@code rbridge serve ARGS --memserver ...} (every memserver of {@code cluster}) with NBD and admin on free
     * loopback ports, and waits until it serves.
     */
    static TakeoverBridge start(ServeCluster cluster, String label, List<String> args, Duration timeout)
            throws IOException, InterruptedException {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        List<String> argv = new ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED", "-XX:+UseParallelGC",
                "-cp", System.getProperty("java.class.path"), Main.class.getName(), "serve", "--listen", "127.0.0.1:0",
                "--admin", "127.0.0.1:0", "--metrics", "none"));
        for (ServeCluster.Memserver m : cluster.memservers()) {
            argv.addAll(List.of("--memserver", m.address()));
        }
        argv.addAll(args);
        Path out = cluster.logDir().resolve(label + ".out");
        Path log = cluster.logDir().resolve(label + ".log");
        Process p = new ProcessBuilder(argv).redirectOutput(out.toFile()).redirectError(log.toFile())
                .redirectInput(ProcessBuilder.Redirect.from(Path.of("/dev/null").toFile())).start();
        LIVE.add(p);
        TakeoverBridge b = new TakeoverBridge(p, out, log);
        try {
            String serving = b.await(SERVING, timeout);
            b.uriPrefix = serving.substring(0, serving.lastIndexOf('/') + 1);
            b.admin = b.await(ADMIN, timeout);
            return b;
        } catch (IOException | InterruptedException | RuntimeException e) {
            b.close();
            throw e;
        }
    }

    private String await(Pattern p, Duration timeout) throws IOException, InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (true) {
            Matcher m = p.matcher(Files.readString(out, StandardCharsets.UTF_8));
            if (m.find()) {
                return m.group(1);
            }
            if (!process.isAlive() || System.nanoTime() > deadline) {
                throw new IllegalStateException("the takeover bridge " + (process.isAlive() ? "did not print '" + p
                        + "' within " + timeout : "exited with " + process.exitValue()) + "; its log:\n" + log());
            }
            Thread.sleep(50);
        }
    }

    /** {@code nbd://127.0.0.1:PORT/VOLUME}. */
    String uri(String volume) {
        return uriPrefix + volume;
    }

    /** GET {@code path} on its admin interface, parsed. */
    Object admin(String path) throws IOException, InterruptedException {
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://" + admin + path))
                .timeout(Duration.ofSeconds(10)).GET().build(), HttpResponse.BodyHandlers.ofString());
        if (r.statusCode() != 200) {
            throw new IllegalStateException("GET " + path + ": HTTP " + r.statusCode() + ": " + r.body());
        }
        return ServeCluster.Json.parse(r.body());
    }

    String log() throws IOException {
        return Files.exists(log) ? Files.readString(log, StandardCharsets.UTF_8) : "";
    }

    /** SIGTERM, and wait up to {@code grace}; returns the exit code, or -1 if it had to be killed. */
    int stop(Duration grace) throws InterruptedException {
        process.destroy();
        boolean ended = process.waitFor(grace.toMillis(), TimeUnit.MILLISECONDS);
        if (!ended) {
            process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
        if (!process.isAlive()) {
            LIVE.remove(process);
        }
        return ended ? process.exitValue() : -1;
    }

    @Override
    public void close() throws InterruptedException {
        if (process.isAlive()) {
            stop(Duration.ofSeconds(15));
        }
    }
}
