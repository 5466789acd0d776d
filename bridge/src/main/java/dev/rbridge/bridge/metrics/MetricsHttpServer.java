package dev.rbridge.bridge.metrics;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.Executors;

/**
 * Serves a {@link Telemetry} over HTTP for Prometheus and orchestrators. No token: like most exporters it binds to
 * localhost by default, and exposes counts, never data or keys.
 *
 * <pre>
 * GET /metrics   Prometheus text format 0.0.4
 * GET /healthz   200 "ok" while the process runs (liveness)
 * GET /readyz    200 when serving (warnings listed in the body), 503 with the reasons when not
 * </pre>
 */
public final class MetricsHttpServer implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(MetricsHttpServer.class);
    private static final String TEXT_004 = "text/plain; version=0.0.4; charset=utf-8";

    private final HttpServer http;
    private final Telemetry telemetry;

    public MetricsHttpServer(InetSocketAddress address, Telemetry telemetry) throws IOException {
        this.telemetry = telemetry;
        this.http = HttpServer.create(address, 16);
        http.setExecutor(Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "metrics-http");
            t.setDaemon(true);
            return t;
        }));
        http.createContext("/", this::handle);
        http.start();
        log.info("metrics at http://{}:{}/metrics", address().getHostString(), address().getPort());
    }

    public InetSocketAddress address() {
        return http.getAddress();
    }

    private void handle(HttpExchange ex) throws IOException {
        try (ex) {
            String method = ex.getRequestMethod();
            if (!method.equals("GET") && !method.equals("HEAD")) {
                send(ex, 405, "text/plain; charset=utf-8", "only GET\n");
                return;
            }
            String body;
            int status = 200;
            String type = "text/plain; charset=utf-8";
            try {
                switch (ex.getRequestURI().getPath()) {
                    case "/metrics" -> {
                        body = telemetry.scrape();
                        type = TEXT_004;
                    }
                    case "/healthz" -> body = "ok\n";
                    case "/readyz" -> {
                        List<Telemetry.Problem> problems = telemetry.readiness();
                        boolean ready = problems.stream().noneMatch(Telemetry.Problem::fatal);
                        StringBuilder b = new StringBuilder(ready ? "ready\n" : "not ready\n");
                        for (Telemetry.Problem p : problems) {
                            b.append(p.fatal() ? "not ready: " : "warning: ").append(p.text()).append('\n');
                        }
                        body = b.toString();
                        status = ready ? 200 : 503;
                    }
                    default -> {
                        body = "not found; try /metrics, /healthz or /readyz\n";
                        status = 404;
                    }
                }
            } catch (RuntimeException e) {
                log.warn("metrics request {} failed", ex.getRequestURI(), e);
                body = "internal error: " + e + "\n";
                status = 500;
                type = "text/plain; charset=utf-8";
            }
            send(ex, status, type, body);
        }
    }

    private static void send(HttpExchange ex, int status, String type, String body) throws IOException {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", type);
        boolean head = ex.getRequestMethod().equals("HEAD");
        ex.sendResponseHeaders(status, head ? -1 : bytes.length);
        if (!head) {
            try (OutputStream out = ex.getResponseBody()) {
                out.write(bytes);
            }
        }
    }

    @Override
    public void close() {
        http.stop(0);
        ((java.util.concurrent.ExecutorService) http.getExecutor()).shutdownNow();
    }
}
