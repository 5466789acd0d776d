package dev.rbridge.ops.metrics;

import dev.rbridge.ops.http.HttpResponse;
import dev.rbridge.ops.http.OpsHttpConfig;
import dev.rbridge.ops.http.OpsHttpServer;
import dev.rbridge.ops.http.Routes;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.List;

/**
 * Serves a {@link Telemetry} over HTTP for Prometheus and orchestrators, on the ops server. No token: like most
 * exporters it binds to localhost by default, and exposes counts, never data or keys.
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

    private final OpsHttpServer http;
    private final Telemetry telemetry;

    /** @throws java.net.BindException when the address is taken */
    public MetricsHttpServer(InetSocketAddress address, Telemetry telemetry) throws IOException {
        this.telemetry = telemetry;
        OpsHttpMeters meters = new OpsHttpMeters(telemetry.registry(), "metrics");
        Routes routes = Routes.builder(null)
                .open("/metrics", r -> HttpResponse.of(200, TEXT_004, telemetry.scrape()))
                .open("/healthz", r -> HttpResponse.text(200, "ok\n"))
                .open("/readyz", r -> readyz())
                .build();
        this.http = OpsHttpServer.start(OpsHttpConfig.builder("metrics", address).build(), routes, meters);
        meters.bindConnections(http::openConnections);
        log.info("metrics at http://{}:{}/metrics", address().getHostString(), address().getPort());
    }

    private HttpResponse readyz() {
        List<Telemetry.Problem> problems = telemetry.readiness();
        boolean ready = problems.stream().noneMatch(Telemetry.Problem::fatal);
        StringBuilder b = new StringBuilder(ready ? "ready\n" : "not ready\n");
        for (Telemetry.Problem p : problems) {
            b.append(p.fatal() ? "not ready: " : "warning: ").append(p.text()).append('\n');
        }
        return HttpResponse.text(ready ? 200 : 503, b.toString());
    }

    public InetSocketAddress address() {
        return http.address();
    }

    @Override
    public void close() {
        http.close();
    }
}
