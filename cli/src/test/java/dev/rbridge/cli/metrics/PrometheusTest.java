package dev.rbridge.cli.metrics;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import org.yaml.snakeyaml.Yaml;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.function.DoublePredicate;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A real Prometheus (Debian's package) scrapes a real bridge and two memserver processes with the project's scrape
 * config and alert rules from {@code deploy/prometheus}: targets are up, counters move by exactly the I/O done,
 * promtool accepts both endpoints and the deploy files, every dashboard query names a metric that exists and
 * evaluates, and killing a memserver moves the state metrics and fires the alerts (live in Prometheus, and with
 * {@code promtool test rules} over the series Prometheus recorded).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Tag("interop")
class PrometheusTest {
    private static final Path ROOT = Path.of(System.getProperty("basedir", "."), "..").toAbsolutePath().normalize();
    private static final Path DEPLOY = ROOT.resolve("deploy");
    private static final int WRITES = 200;
    private static final int WRITE_SIZE = 64 << 10;
    private static final int STRIDE = 1 << 20;
    private static final int READS = 300;
    private static final int SLAB = 16 << 20;
    /** Slabs the writes touch: one manifest write per slab per memserver comes with each. */
    private static final int SLABS_WRITTEN = (int) (((long) (WRITES - 1) * STRIDE) / SLAB) + 1;
    private static final int STEP_SECONDS = 2;

    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    private ServeCluster cluster;
    private Process prometheus;
    private Path dir;
    private String prom;
    private long startedAtSeconds;

    @BeforeAll
    void start() throws Exception {
        PeerTool.require("prometheus", "prometheus");
        PeerTool.require("promtool", "prometheus");
        PeerTool.check(30, "python3", "-c", "import nbd");
        cluster = ServeCluster.builder("prometheus").memservers(2).capacity("1G")
                .volume("disk,size=256M,replicas=2,slab=16M").metrics(true).start();
        dir = Files.createDirectories(cluster.logDir().resolve("prometheus"));
        String config = Files.readString(DEPLOY.resolve("prometheus/prometheus.yml"));
        config = replace(config, "[\"127.0.0.1:7475\"]", "[\"" + cluster.metricsAddress() + "\"]");
        config = replace(config, "[\"127.0.0.1:7474\"]", "[\"" + cluster.memserver(0).metricsAddress() + "\", \""
                + cluster.memserver(1).metricsAddress() + "\"]");
        config = replace(config, "scrape_interval: 15s", "scrape_interval: 1s");
        config = replace(config, "evaluation_interval: 15s", "evaluation_interval: 1s");
        config = replace(config, "  - rbridge-alerts.yml", "  - " + DEPLOY.resolve("prometheus/rbridge-alerts.yml"));
        Path file = dir.resolve("prometheus.yml");
        Files.writeString(file, config);
        PeerTool.check(60, "promtool", "check", "config", file.toString());
        startedAtSeconds = System.currentTimeMillis() / 1000;
        for (int attempt = 1;; attempt++) {
            int port;
            try (ServerSocket s = new ServerSocket(0)) {
                port = s.getLocalPort();
            }
            prom = "http://127.0.0.1:" + port;
            Path log = dir.resolve("prometheus-" + attempt + ".log");
            prometheus = new ProcessBuilder("prometheus", "--config.file=" + file, "--storage.tsdb.path="
                    + dir.resolve("data"), "--web.listen-address=127.0.0.1:" + port, "--log.level=warn")
                    .redirectErrorStream(true).redirectOutput(log.toFile()).start();
            if (awaitReady(log)) {
                break;
            }
            // the free port was taken between choosing and binding it: choose again
            if (attempt == 3 || !Files.readString(log).contains("address already in use")) {
                fail("prometheus did not become ready:\n" + Files.readString(log));
            }
        }
    }

    private boolean awaitReady(Path log) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (true) {
            try {
                if (get(prom + "/-/ready").statusCode() == 200) {
                    return true;
                }
            } catch (IOException e) {
                // not listening yet
            }
            if (!prometheus.isAlive()) {
                return false;
            }
            if (System.nanoTime() > deadline) {
                fail("prometheus did not become ready within 60 s:\n" + Files.readString(log));
            }
            Thread.sleep(200);
        }
    }

    @AfterAll
    void stop() throws Exception {
        if (prometheus != null) {
            prometheus.destroy();
            if (!prometheus.waitFor(20, TimeUnit.SECONDS)) {
                prometheus.destroyForcibly();
            }
        }
        if (cluster != null) {
            cluster.close();
        }
    }

    @Test
    @Order(1)
    void targetsAreUpAndCountersMoveByExactlyTheIoDone() throws Exception {
        awaitTrue("all three targets up", () -> {
            List<Object> targets = list(map(json(prom + "/api/v1/targets").get("data")).get("activeTargets"));
            return targets.size() == 3 && targets.stream().allMatch(t -> "up".equals(map(t).get("health")));
        });
        // Nothing has done I/O yet: once every target was scraped after this moment, the baselines are what the
        // processes hold now.
        awaitScrapedAfter(Instant.now());
        String writes = "sum(rbridge_nbd_requests_total{job=\"rbridge-bridge\",export=\"disk\",op=\"write\"})";
        String reads = "sum(rbridge_nbd_requests_total{job=\"rbridge-bridge\",export=\"disk\",op=\"read\"})";
        String writeBytes = "sum(rbridge_nbd_request_bytes_total{export=\"disk\",op=\"write\"})";
        String readBytes = "sum(rbridge_nbd_request_bytes_total{export=\"disk\",op=\"read\"})";
        String writeCount = "sum(rbridge_nbd_request_duration_seconds_count{export=\"disk\",op=\"write\"})";
        String writeInf = "sum(rbridge_nbd_request_duration_seconds_bucket{export=\"disk\",op=\"write\",le=\"+Inf\"})";
        String errors = "sum(rbridge_nbd_errors_total) or vector(0)";
        String remoteReads = "sum(rbridge_remote_ops_total{op=\"read\"})";
        String served = "sum(rbridge_transport_write_ops_total{job=\"rbridge-memserver\"})";
        String resident = "sum(rbridge_memserver_resident_bytes{job=\"rbridge-memserver\"})";
        Map<String, Double> before = new LinkedHashMap<>();
        for (String q : List.of(writes, reads, writeBytes, readBytes, writeCount, writeInf, errors, remoteReads, served,
                resident)) {
            before.put(q, value(q));
        }
        Map<String, Double> remoteWritesBefore = new LinkedHashMap<>();
        for (ServeCluster.Memserver m : cluster.memservers()) {
            String q = "rbridge_remote_ops_total{op=\"write\",memserver=\"" + m.address() + "\"}";
            remoteWritesBefore.put(q, value(q));
        }

        String out = PeerTool.check(120, "python3", script("exact_io.py"), cluster.uri("disk"), String.valueOf(WRITES),
                String.valueOf(WRITE_SIZE), String.valueOf(STRIDE), String.valueOf(READS));
        assertTrue(out.contains("ok " + WRITES + " writes"), out);

        awaitValue(writes, v -> v == before.get(writes) + WRITES);
        awaitValue(reads, v -> v == before.get(reads) + READS);
        assertEquals(before.get(writeBytes) + (double) WRITES * WRITE_SIZE, value(writeBytes), writeBytes);
        assertEquals(before.get(readBytes) + READS * 4096.0, value(readBytes), readBytes);
        assertEquals(before.get(writeCount) + WRITES, value(writeCount), "histogram count moves with the counter");
        assertEquals(value(writeCount), value(writeInf), "every write lands in some bucket");
        assertEquals(before.get(errors), value(errors), "no errors");
        // R=2: every NBD write is one remote write on each memserver; a 4 KiB read is one remote read on one of them.
        for (Map.Entry<String, Double> e : remoteWritesBefore.entrySet()) {
            awaitValue(e.getKey(), v -> v == e.getValue() + WRITES);
        }
        awaitValue(remoteReads, v -> v == before.get(remoteReads) + READS);
        // The memservers served those writes plus the allocation manifest's (one per slab first written, on each).
        awaitValue(served, v -> v >= before.get(served) + 2 * WRITES
                && v <= before.get(served) + 2 * WRITES + 2 * SLABS_WRITTEN);
        awaitValue(resident, v -> v >= before.get(resident) + 2.0 * WRITES * WRITE_SIZE);
        // Something below 1 s: the histogram resolves the data path, not just its tail.
        double fast =
                value("sum(rbridge_nbd_request_duration_seconds_bucket{export=\"disk\",op=\"write\",le=\"0.25\"})");
        assertTrue(fast > 0, "writes under 250 ms are counted in a bucket below 1 s: " + fast);
        double enforced = value("sum(rbridge_memserver_keys_enforced{job=\"rbridge-memserver\"})");
        assertEquals(cluster.memservers().size(), enforced, "tcp hands out no remote keys: every memserver checks "
                + "every operation itself");
        assertEquals(0.0, value("sum(rbridge_memserver_lingering_bytes{job=\"rbridge-memserver\"})"),
                "nothing released is pinned");
    }

    @Test
    @Order(2)
    void promtoolAcceptsBothEndpointsAndTheProbesAnswer() throws Exception {
        for (String address : List.of(cluster.metricsAddress(), cluster.memserver(0).metricsAddress())) {
            HttpResponse<String> r = get("http://" + address + "/metrics");
            assertEquals(200, r.statusCode());
            assertTrue(r.headers().firstValue("Content-Type").orElse("").startsWith("text/plain; version=0.0.4"));
            Path exposition = dir.resolve("exposition-" + address.replace(':', '_') + ".txt");
            Files.writeString(exposition, r.body());
            Process p = new ProcessBuilder("promtool", "check", "metrics").redirectInput(exposition.toFile())
                    .redirectErrorStream(true).start();
            String lint = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(60, TimeUnit.SECONDS));
            assertEquals(0, p.exitValue(), "promtool check metrics on " + address + ":\n" + lint);
            assertEquals("", lint.strip(), "promtool check metrics on " + address);
            assertEquals(200, get("http://" + address + "/healthz").statusCode());
            HttpResponse<String> ready = get("http://" + address + "/readyz");
            assertEquals(200, ready.statusCode(), ready.body());
            assertTrue(ready.body().startsWith("ready"), ready.body());
            assertEquals(404, get("http://" + address + "/nothing").statusCode());
        }
    }

    @Test
    @Order(3)
    void deployFilesPassPromtool() {
        Path p = DEPLOY.resolve("prometheus");
        PeerTool.check(60, "promtool", "check", "config", p.resolve("prometheus.yml").toString());
        PeerTool.check(60, "promtool", "check", "rules", p.resolve("rbridge-alerts.yml").toString());
        String out = PeerTool.check(120, "promtool", "test", "rules", p.resolve("rbridge-alerts.test.yml").toString());
        assertTrue(out.contains("SUCCESS"), out);
    }

    @Test
    @Order(4)
    void everyDashboardQueryNamesExistingMetricsAndEvaluates() throws Exception {
        Set<String> exposed = new HashSet<>(List.of("up")); // Prometheus's own per-target series
        for (String address : List.of(cluster.metricsAddress(), cluster.memserver(0).metricsAddress())) {
            for (String line : get("http://" + address + "/metrics").body().split("\n")) {
                if (!line.isEmpty() && !line.startsWith("#")) {
                    exposed.add(line.split("[{ ]", 2)[0]);
                }
            }
        }
        Map<String, Object> dashboard = map(ServeCluster.Json.parse(
                Files.readString(DEPLOY.resolve("grafana/rbridge-dashboard.json"))));
        List<String> queries = new ArrayList<>();
        for (Object p : list(dashboard.get("panels"))) {
            for (Object t : list(map(p).get("targets"))) {
                queries.add((String) map(t).get("expr"));
            }
        }
        for (Object v : list(map(dashboard.get("templating")).get("list"))) {
            Object def = map(v).get("definition");
            if (def != null) {
                queries.add((String) def);
            }
        }
        assertTrue(queries.size() >= 20, "the dashboard has its queries: " + queries.size());
        Pattern token = Pattern.compile("[a-zA-Z_:][a-zA-Z0-9_:]*");
        Set<String> keywords = Set.of("and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                "group_right", "bool", "offset");
        for (String q : queries) {
            String expr = q.replace("$__rate_interval", "1m").replace("$bridge", ".*").replace("$export", ".*");
            if (expr.startsWith("label_values(")) {
                // label_values(METRIC{...}, LABEL): a Grafana variable query; only its metric is a name to check
                Matcher lv = Pattern.compile("label_values\\(([a-zA-Z_:][a-zA-Z0-9_:]*)").matcher(expr);
                assertTrue(lv.find(), q);
                assertTrue(exposed.contains(lv.group(1)), "dashboard variable names " + lv.group(1)
                        + ", which no endpoint exposes: " + q);
                continue;
            }
            // What is left once strings, label matchers, ranges and grouping lists are gone: metric names, functions
            // (followed by "("), keywords and numbers.
            String bare = expr.replaceAll("\"[^\"]*\"", "\"\"").replaceAll("\\{[^}]*}", " ")
                    .replaceAll("\\[[^]]*]", " ").replaceAll("\\b(by|on|without|ignoring)\\s*\\([^)]*\\)", " ");
            Matcher m = token.matcher(bare);
            int names = 0;
            while (m.find()) {
                String name = m.group();
                int after = m.end();
                while (after < bare.length() && bare.charAt(after) == ' ') {
                    after++;
                }
                boolean call = after < bare.length() && bare.charAt(after) == '(';
                if (call || keywords.contains(name)) {
                    continue;
                }
                names++;
                assertTrue(exposed.contains(name),
                        "dashboard query names " + name + ", which no endpoint exposes: " + q);
            }
            assertTrue(names > 0, "found no metric in " + q);
            Map<String, Object> r = json(prom + "/api/v1/query?query=" + enc(expr));
            assertEquals("success", r.get("status"), "Prometheus evaluates " + expr + ": " + r);
            // Every series these queries read exists by now (meters are made up front), so a wrong label, job or
            // metric selector shows up as an empty result.
            assertFalse(list(map(r.get("data")).get("result")).isEmpty(), "no series for dashboard query " + expr);
        }
    }

    @Test
    @Order(5)
    void killingAMemserverMovesTheStateMetricsAndFiresTheAlerts() throws Exception {
        ServeCluster.Memserver victim = cluster.memserver(1);
        String instance = victim.metricsAddress();
        String address = victim.address();
        assertEquals(1.0, value("rbridge_memserver_reachable{memserver=\"" + address + "\"}"));
        assertEquals(0.0, value("sum(rbridge_volume_slabs{state=~\"degraded|rebuilding|lost\"})"));
        assertEquals(SLABS_WRITTEN, value("sum(rbridge_volume_slabs{state=\"healthy\"})"));
        long killedAt = System.currentTimeMillis() / 1000;
        victim.kill9();

        awaitValue("up{job=\"rbridge-memserver\",instance=\"" + instance + "\"}", v -> v == 0);
        awaitValue("rbridge_memserver_reachable{memserver=\"" + address + "\"}", v -> v == 0);
        awaitValue("sum(rbridge_volume_slabs{state=\"degraded\"})", v -> v == SLABS_WRITTEN);
        assertEquals(0.0, value("sum(rbridge_volume_slabs{state=\"lost\"})"), "R=2: nothing lost");
        HttpResponse<String> ready = get("http://" + cluster.metricsAddress() + "/readyz");
        assertEquals(200, ready.statusCode(), "a degraded bridge still serves: " + ready.body());
        assertTrue(ready.body().contains("warning: memserver " + address + " unreachable"), ready.body());
        assertTrue(ready.body().contains("warning: volume disk degraded"), ready.body());

        // Prometheus, evaluating the deploy rules every second, has them pending (their for: has not passed yet).
        for (String alert : List.of("RbridgeMemserverDown", "RbridgeMemserverUnreachable", "RbridgeVolumeDegraded")) {
            awaitTrue(alert + " pending or firing in Prometheus", () -> {
                for (Object a : list(map(json(prom + "/api/v1/alerts").get("data")).get("alerts"))) {
                    if (alert.equals(map(map(a).get("labels")).get("alertname"))) {
                        return true;
                    }
                }
                return false;
            });
        }

        // The series Prometheus recorded, from its start to now, held at their last value for three more minutes (the
        // memserver stays dead), must fire the three alerts once their for: has passed, and none before the kill.
        // Wait a step so the last point of the recorded grid lies after Prometheus saw the new state.
        Thread.sleep((STEP_SECONDS + 1) * 1000L);
        long end = System.currentTimeMillis() / 1000;
        long start = startedAtSeconds + 2;
        int killIndex = (int) ((killedAt - start) / STEP_SECONDS) - 1;
        assertTrue(killIndex > 0, "recorded some samples before the kill");
        StringBuilder series = new StringBuilder();
        int points = (int) ((end - start) / STEP_SECONDS) + 1;
        Map<String, Double> last = new LinkedHashMap<>();
        for (String q : List.of("up{job=\"rbridge-memserver\"}", "rbridge_memserver_reachable",
                "rbridge_volume_slabs")) {
            Map<String, Object> r = json(prom + "/api/v1/query_range?query=" + enc(q) + "&start=" + start + "&end="
                    + end + "&step=" + STEP_SECONDS);
            for (Object o : list(map(map(r.get("data"))).get("result"))) {
                Map<String, Object> s = map(o);
                Map<String, Object> metric = map(s.get("metric"));
                String[] values = new String[points];
                Arrays.fill(values, "_");
                String lastValue = "_";
                for (Object pv : list(s.get("values"))) {
                    List<Object> pair = list(pv);
                    int i = (int) Math.round((((Number) pair.get(0)).doubleValue() - start) / STEP_SECONDS);
                    if (i >= 0 && i < points) {
                        values[i] = (String) pair.get(1);
                        lastValue = values[i];
                    }
                }
                StringBuilder labels = new StringBuilder();
                for (Map.Entry<String, Object> e : new TreeMap<>(metric).entrySet()) {
                    if (!e.getKey().equals("__name__")) {
                        labels.append(labels.isEmpty() ? "" : ", ").append(e.getKey()).append("=\"")
                                .append(e.getValue()).append('"');
                    }
                }
                String name = (String) metric.get("__name__");
                series.append("      - series: '").append(name).append('{').append(labels).append("}'\n")
                        .append("        values: '").append(String.join(" ", values)).append(' ').append(lastValue)
                        .append('x').append(180 / STEP_SECONDS).append("'\n");
                if (!lastValue.equals("_")) {
                    last.put(name + metric, Double.parseDouble(lastValue));
                }
            }
        }
        double degradedNow = 0;
        for (Map.Entry<String, Double> e : last.entrySet()) {
            if (e.getKey().startsWith("rbridge_volume_slabs")
                    && e.getKey().matches(".*state=(degraded|rebuilding)\\b.*")) {
                degradedNow += e.getValue();
            }
        }
        Map<String, Map<String, String>> rules = alertRules();
        long fireAt = (long) (points - 1) * STEP_SECONDS + 120; // every for: (at most 1m) has passed by then
        long beforeKill = (long) killIndex * STEP_SECONDS;
        String test = "rule_files:\n  - " + DEPLOY.resolve("prometheus/rbridge-alerts.yml") + "\n"
                + "evaluation_interval: " + STEP_SECONDS + "s\n"
                + "tests:\n  - interval: " + STEP_SECONDS + "s\n    input_series:\n" + series
                + "    alert_rule_test:\n"
                + noAlert("RbridgeMemserverDown", beforeKill) + noAlert("RbridgeMemserverUnreachable", beforeKill)
                + noAlert("RbridgeVolumeDegraded", beforeKill)
                + expected("RbridgeMemserverDown", fireAt, rules, Map.of("severity", "warning", "job",
                        "rbridge-memserver", "instance", instance), 0)
                + expected("RbridgeMemserverUnreachable", fireAt, rules, Map.of("severity", "warning", "job",
                        "rbridge-bridge", "instance", cluster.metricsAddress(), "memserver", address), 0)
                + expected("RbridgeVolumeDegraded", fireAt, rules, Map.of("severity", "warning", "instance",
                        cluster.metricsAddress(), "export", "disk"), degradedNow);
        Path file = dir.resolve("recorded-alerts.test.yml");
        Files.writeString(file, test);
        PeerTool.Result r = PeerTool.run(120, List.of("promtool", "test", "rules", file.toString()));
        assertEquals(0, r.exitCode(), "promtool test rules " + file + ":\n" + r.output());
        assertFalse(r.output().contains("FAILED"), r.output());
    }

    // ------------------------------------------------------------------------------------------------ helpers

    private static String noAlert(String name, long at) {
        return "      - eval_time: " + at + "s\n        alertname: " + name + "\n        exp_alerts: []\n";
    }

    /** An expected alert, its annotations rendered from the deploy rules the way Prometheus's templates would. */
    private static String expected(String name, long at, Map<String, Map<String, String>> rules,
            Map<String, String> labels, double value) {
        StringBuilder b = new StringBuilder("      - eval_time: " + at + "s\n        alertname: " + name
                + "\n        exp_alerts:\n          - exp_labels:\n");
        new TreeMap<>(labels).forEach((k, v) -> b.append("              ").append(k).append(": \"")
                .append(v).append("\"\n"));
        b.append("            exp_annotations:\n");
        Map<String, String> annotations = rules.get(name);
        if (annotations == null) {
            fail("no alert " + name + " in the deploy rules");
        }
        for (Map.Entry<String, String> e : annotations.entrySet()) {
            String text = e.getValue();
            for (Map.Entry<String, String> l : labels.entrySet()) {
                text = text.replace("{{ $labels." + l.getKey() + " }}", l.getValue());
            }
            text = text.replace("{{ $value }}", value == Math.rint(value) ? String.valueOf((long) value)
                    : String.valueOf(value));
            assertFalse(text.contains("{{"), "annotation of " + name + " uses a template this test cannot render: "
                    + text);
            b.append("              ").append(e.getKey()).append(": \"")
                    .append(text.replace("\\", "\\\\").replace("\"", "\\\"")).append("\"\n");
        }
        return b.toString();
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Map<String, String>> alertRules() throws IOException {
        Map<String, Object> doc = new Yaml().load(Files.readString(DEPLOY.resolve("prometheus/rbridge-alerts.yml")));
        Map<String, Map<String, String>> out = new LinkedHashMap<>();
        for (Object g : (List<Object>) doc.get("groups")) {
            for (Object r : (List<Object>) ((Map<String, Object>) g).get("rules")) {
                Map<String, Object> rule = (Map<String, Object>) r;
                out.put((String) rule.get("alert"), (Map<String, String>) rule.get("annotations"));
            }
        }
        return out;
    }

    private static String replace(String text, String from, String to) {
        if (!text.contains(from)) {
            fail("deploy/prometheus/prometheus.yml no longer contains " + from + "; update this test with it");
        }
        return text.replace(from, to);
    }

    private static String script(String name) throws IOException {
        Path p = Path.of(System.getProperty("basedir", "."), "src/test/resources/metrics", name);
        if (!Files.exists(p)) {
            throw new IOException("missing " + p);
        }
        return p.toString();
    }

    private static String enc(String s) {
        return URLEncoder.encode(s, StandardCharsets.UTF_8);
    }

    private HttpResponse<String> get(String url) throws IOException, InterruptedException {
        return http.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(20)).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    private Map<String, Object> json(String url) throws IOException, InterruptedException {
        HttpResponse<String> r = get(url);
        assertEquals(200, r.statusCode(), url + ": " + r.body());
        return map(ServeCluster.Json.parse(r.body()));
    }

    /** The single value of an instant query; fails when it has no or several series. */
    private double value(String query) throws IOException, InterruptedException {
        List<Object> result = list(map(json(prom + "/api/v1/query?query=" + enc(query)).get("data")).get("result"));
        if (result.size() != 1) {
            fail(query + " gave " + result.size() + " series: " + result);
        }
        return Double.parseDouble((String) list(map(result.getFirst()).get("value")).get(1));
    }

    private void awaitValue(String query, DoublePredicate ok) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        double v = Double.NaN;
        while (System.nanoTime() < deadline) {
            List<Object> result = list(map(json(prom + "/api/v1/query?query=" + enc(query)).get("data")).get("result"));
            if (result.size() == 1) {
                v = Double.parseDouble((String) list(map(result.getFirst()).get("value")).get(1));
                if (ok.test(v)) {
                    return;
                }
            }
            Thread.sleep(250);
        }
        fail(query + " did not reach the expected value within 30 s; last " + v + "\n" + cluster.bridge().log());
    }

    /** Until Prometheus has scraped every target (successfully) at a time after {@code mark}. */
    private void awaitScrapedAfter(Instant mark) throws Exception {
        awaitTrue("every target scraped after " + mark, () -> {
            List<Object> targets = list(map(json(prom + "/api/v1/targets").get("data")).get("activeTargets"));
            return !targets.isEmpty() && targets.stream().allMatch(t -> "up".equals(map(t).get("health"))
                    && OffsetDateTime.parse((String) map(t).get("lastScrape")).toInstant().isAfter(mark));
        });
    }

    private interface Check {
        boolean ok() throws Exception;
    }

    private static void awaitTrue(String what, Check c) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!c.ok()) {
            if (System.nanoTime() > deadline) {
                fail(what + ": not within 30 s");
            }
            Thread.sleep(250);
        }
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> map(Object o) {
        return (Map<String, Object>) o;
    }

    @SuppressWarnings("unchecked")
    private static List<Object> list(Object o) {
        return (List<Object>) o;
    }
}
