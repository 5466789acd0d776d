package dev.rbridge.ops.metrics;

import dev.rbridge.ops.http.OpsHttpMetrics;
import dev.rbridge.ops.http.Refusal;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;

import java.util.EnumMap;
import java.util.Map;
import java.util.function.IntSupplier;

/**
 * An ops HTTP server's refusals on a Micrometer registry, every reason registered up front so its series exist at
 * zero; and its open connections.
 *
 * <pre>
 * rbridge_http_refusals_total{server,reason}  refused, timed out or evicted peers (reasons: {@link Refusal})
 * rbridge_http_connections{server}            connections open now
 * </pre>
 * {@code server} is {@code metrics} or {@code admin}.
 */
public final class OpsHttpMeters implements OpsHttpMetrics {
    private final Map<Refusal, Counter> refusals = new EnumMap<>(Refusal.class);
    private final MeterRegistry registry;
    private final String server;

    public OpsHttpMeters(MeterRegistry registry, String server) {
        this.registry = registry;
        this.server = server;
        for (Refusal r : Refusal.values()) {
            refusals.put(r, Counter.builder("rbridge.http.refusals").tag("server", server).tag("reason", r.label())
                    .description("Peers the ops HTTP server refused, timed out or evicted, by reason")
                    .register(registry));
        }
    }

    @Override
    public void refused(Refusal reason) {
        refusals.get(reason).increment();
    }

    /** Reports the open connections of the server {@code open} counts. */
    public void bindConnections(IntSupplier open) {
        Gauge.builder("rbridge.http.connections", open, IntSupplier::getAsInt).tag("server", server)
                .description("Connections open on the ops HTTP server").strongReference(true).register(registry);
    }
}
