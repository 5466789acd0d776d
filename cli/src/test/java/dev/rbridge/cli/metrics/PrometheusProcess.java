package dev.rbridge.cli.metrics;

import dev.rbridge.cli.serve.ServeCluster;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * A real Prometheus (Debian's package) with the project's scrape config and alert rules from {@code
 * deploy/prometheus}, pointed at one bridge's and some memservers' metrics, scraping and evaluating every second.
 */
final class PrometheusProcess implements AutoCloseable {
    static final Path ROOT = Path.of(System.getProperty("basedir", "."), "..").toAbsolutePath().normalize();
    static final Path DEPLOY = ROOT.resolve("deploy");

    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    private final Process process;
    private final String url;

    private PrometheusProcess(Process process, String url) {
        this.process = process;
        this.url = url;
    }

    /** Started and ready; {@code bridge} and {@code memservers} are metrics {@code host:port}s. */
    static PrometheusProcess start(Path dir, String bridge, List<String> memservers) throws Exception {
        String config = Files.readString(DEPLOY.resolve("prometheus/prometheus.yml"));
        config = replace(config, "[\"127.0.0.1:7475\"]", "[\"" + bridge + "\"]");
        config = replace(config, "[\"127.0.0.1:7474\"]", "[" + String.join(", ", memservers.stream()
                .map(m -> "\"" + m + "\"").toList()) + "]");
        config = replace(config, "scrape_interval: 15s", "scrape_interval: 1s");
        config = replace(config, "evaluation_interval: 15s", "evaluation_interval: 1s");
        config = replace(config, "  - rbridge-alerts.yml", "  - " + DEPLOY.resolve("prometheus/rbridge-alerts.yml"));
        Path file = dir.resolve("prometheus.yml");
        Files.writeString(file, config);
        for (int attempt = 1;; attempt++) {
            int port;
            try (ServerSocket s = new ServerSocket(0)) {
                port = s.getLocalPort();
            }
            Path log = dir.resolve("prometheus-" + attempt + ".log");
            Process p = new ProcessBuilder("prometheus", "--config.file=" + file, "--storage.tsdb.path="
                    + dir.resolve("data"), "--web.listen-address=127.0.0.1:" + port, "--log.level=warn")
                    .redirectErrorStream(true).redirectOutput(log.toFile()).start();
            PrometheusProcess prom = new PrometheusProcess(p, "http://127.0.0.1:" + port);
            if (prom.awaitReady(log)) {
                return prom;
            }
            // the free port was taken between choosing and binding it: choose again
            if (attempt == 3 || !Files.readString(log).contains("address already in use")) {
                throw new IllegalStateException("prometheus did not become ready:\n" + Files.readString(log));
            }
        }
    }

    private boolean awaitReady(Path log) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (true) {
            try {
                if (get(url + "/-/ready").statusCode() == 200) {
                    return true;
                }
            } catch (IOException e) {
                // not listening yet
            }
            if (!process.isAlive()) {
                return false;
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("prometheus did not become ready within 60 s:\n"
                        + Files.readString(log));
            }
            Thread.sleep(200);
        }
    }

    String url() {
        return url;
    }

    HttpResponse<String> get(String u) throws IOException, InterruptedException {
        return http.send(HttpRequest.newBuilder(URI.create(u)).timeout(Duration.ofSeconds(20)).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    /** The state of alert {@code name} now ("pending", "firing"), or null when it is neither. */
    @SuppressWarnings("unchecked")
    String alertState(String name) throws IOException, InterruptedException {
        HttpResponse<String> r = get(url + "/api/v1/alerts");
        Map<String, Object> data = (Map<String, Object>) ((Map<String, Object>) ServeCluster.Json.parse(r.body()))
                .get("data");
        for (Object a : (List<Object>) data.get("alerts")) {
            Map<String, Object> alert = (Map<String, Object>) a;
            if (name.equals(((Map<String, Object>) alert.get("labels")).get("alertname"))) {
                return (String) alert.get("state");
            }
        }
        return null;
    }

    static String replace(String text, String from, String to) {
        if (!text.contains(from)) {
            throw new IllegalStateException("deploy/prometheus/prometheus.yml no longer contains " + from
                    + "; update the tests with it");
        }
        return text.replace(from, to);
    }

    @Override
    public void close() throws InterruptedException {
        process.destroy();
        if (!process.waitFor(20, TimeUnit.SECONDS)) {
            process.destroyForcibly();
        }
    }
}
