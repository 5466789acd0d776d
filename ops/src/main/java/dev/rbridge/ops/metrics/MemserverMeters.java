package dev.rbridge.ops.metrics;

import dev.rbridge.memserver.Memserver;
import dev.rbridge.rdma.ConnectionGate;
import dev.rbridge.rdma.ConnectionStats.Snapshot;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;

import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.ToDoubleFunction;

/**
 * A memserver's metrics on a Micrometer registry, all read from {@link Memserver#stats()} when scraped (nothing on
 * the data path). Transport counters are krping's, summed over every client since start.
 *
 * <pre>
 * rbridge_memserver_capacity_bytes                    the hard limit on granted bytes
 * rbridge_memserver_granted_bytes                     bytes of all granted regions
 * rbridge_memserver_resident_bytes                    RAM backing those regions now (written, not released)
 * rbridge_memserver_regions                           regions granted
 * rbridge_memserver_clients                           clients connected
 * rbridge_memserver_draining                          1 while draining
 * rbridge_memserver_refused_connections_total{reason} token, draining, version, malformed, hello_timeout, tls_required,
 *                                                     tls_handshake, no_memory, accept_failed, connection_limit, peer_limit,
 *                                                     unauthenticated_limit, unauthenticated_peer_limit,
 *                                                     unauthenticated_evicted, other
 * rbridge_transport_send_messages_total{transport}    two-sided messages sent (and _bytes_total)
 * rbridge_transport_recv_messages_total{transport}    two-sided messages received (and _bytes_total)
 * rbridge_transport_read_ops_total{transport}         one-sided reads served (and _bytes_total)
 * rbridge_transport_write_ops_total{transport}        one-sided writes served (and _bytes_total)
 * </pre>
 */
public final class MemserverMeters {
    /** Refusal reasons registered up front, so their series exist at zero. */
    static final List<String> REFUSAL_REASONS = List.of("token", "draining", "version", "malformed", "hello_timeout",
            "tls_required", "tls_handshake", "no_memory", "accept_failed", ConnectionGate.CONNECTION_LIMIT,
            ConnectionGate.PEER_LIMIT,
            ConnectionGate.UNAUTHENTICATED_LIMIT, ConnectionGate.UNAUTHENTICATED_PEER_LIMIT,
            ConnectionGate.UNAUTHENTICATED_EVICTED);

    /** Each kind of transport traffic, counted twice: operations (or messages), and their bytes. */
    private record TransportTraffic(String countName, ToDoubleFunction<Snapshot> count, String countDescription,
            String bytesName, ToDoubleFunction<Snapshot> bytes, String bytesDescription) {
    }

    private static final List<TransportTraffic> TRANSPORT_TRAFFIC = List.of(
            new TransportTraffic("send.messages", Snapshot::sendMessages, "Two-sided messages sent",
                    "send", Snapshot::sendBytes, "Bytes of two-sided messages sent"),
            new TransportTraffic("recv.messages", Snapshot::recvMessages, "Two-sided messages received",
                    "recv", Snapshot::recvBytes, "Bytes of two-sided messages received"),
            new TransportTraffic("read.ops", Snapshot::readOps, "One-sided reads served",
                    "read", Snapshot::readBytes, "Bytes of one-sided reads served"),
            new TransportTraffic("write.ops", Snapshot::writeOps, "One-sided writes served",
                    "write", Snapshot::writeBytes, "Bytes of one-sided writes served"));

    private MemserverMeters() {}

    /** Binds the one memserver of a memserver process. */
    public static void bind(MeterRegistry registry, Memserver server) {
        bind(registry, server, Tags.empty());
    }

    /**
     * Binds one of several memservers that share a registry (the embedded mode): a {@code memserver} tag with
     * {@code label} tells them apart, as the bridge names them.
     */
    public static void bind(MeterRegistry registry, Memserver server, String label) {
        bind(registry, server, Tags.of("memserver", label));
    }

    /** @param tags added to every meter */
    private static void bind(MeterRegistry registry, Memserver server, Tags tags) {
        // FunctionCounters hold their object weakly; the gauges below hold c strongly, which keeps it alive for both.
        Cached c = new Cached(server, tags);
        gauge(registry, "rbridge.memserver.capacity", c, s -> s.stats().capacityBytes(), "bytes",
                "Hard limit on the bytes this memserver grants");
        gauge(registry, "rbridge.memserver.granted", c, s -> s.stats().grantedBytes(), "bytes",
                "Bytes of all granted regions");
        gauge(registry, "rbridge.memserver.resident", c, s -> s.stats().residentBytes(), "bytes",
                "RAM backing the granted regions now: pages written and not released (reads of unwritten pages cost"
                        + " nothing and do not count)");
        gauge(registry, "rbridge.memserver.lingering", c, s -> s.stats().lingeringBytes(), "bytes",
                "Bytes of regions released or revoked that an operation still pins: counted as granted until unmapped");
        gauge(registry, "rbridge.memserver.regions", c, s -> s.stats().regions(), null, "Regions granted");
        gauge(registry, "rbridge.memserver.keys.enforced", c, s -> s.server.keysEnforced().enforced() ? 1 : 0, null,
                "1 when the NIC refuses withdrawn remote keys (or the transport hands out none); 0 when UCX emulates "
                        + "GET and PUT or shares registrations, and fencing keeps a grace period");
        gauge(registry, "rbridge.memserver.clients", c, s -> s.stats().clients(), null, "Clients connected");
        gauge(registry, "rbridge.memserver.draining", c, s -> s.stats().draining() ? 1 : 0, null,
                "1 while the memserver drains (refuses new grants and clients)");
        for (String reason : REFUSAL_REASONS) {
            FunctionCounter.builder("rbridge.memserver.refused.connections", c,
                    s -> s.stats().refused().getOrDefault(reason, 0L))
                    .tags(tags).tag("reason", reason).description("Connections refused, by reason").register(registry);
        }
        // A reason a transport adds later is counted, under "other", rather than lost.
        FunctionCounter.builder("rbridge.memserver.refused.connections", c, s -> s.stats().refused().entrySet()
                .stream().filter(e -> !REFUSAL_REASONS.contains(e.getKey())).mapToLong(Map.Entry::getValue).sum())
                .tags(tags).tag("reason", "other").description("Connections refused, by reason").register(registry);
        String transport = server.stats().transport();
        for (TransportTraffic t : TRANSPORT_TRAFFIC) {
            transport(registry, transport, c, t.countName(), t.count(), null, t.countDescription());
            transport(registry, transport, c, t.bytesName(), t.bytes(), "bytes", t.bytesDescription());
        }
    }

    private static void gauge(MeterRegistry registry, String name, Cached c, ToDoubleFunction<Cached> f, String unit,
            String description) {
        Gauge.builder(name, c, f).baseUnit(unit).description(description).tags(c.tags).strongReference(true)
                .register(registry);
    }

    private static void transport(MeterRegistry registry, String transport, Cached c, String what,
            ToDoubleFunction<Snapshot> f, String unit, String description) {
        FunctionCounter.builder("rbridge.transport." + what, c, s -> f.applyAsDouble(s.stats().transportTotals()))
                .baseUnit(unit).tags(c.tags).tag("transport", transport).description(description).register(registry);
    }

    /** One {@link Memserver#stats()} pass (a mincore per region) per scrape, not one per meter. */
    private static final class Cached {
        private final Memserver server;
        private final Tags tags;
        private Memserver.Stats last;
        private long readAtNanos;

        Cached(Memserver server, Tags tags) {
            this.server = server;
            this.tags = tags;
        }

        synchronized Memserver.Stats stats() {
            long now = System.nanoTime();
            if (last == null || now - readAtNanos > TimeUnit.MILLISECONDS.toNanos(200)) {
                last = server.stats();
                readAtNanos = now;
            }
            return last;
        }
    }
}
