package dev.rbridge.ops.metrics;

import dev.rbridge.nbd.protocol.Errno;
import dev.rbridge.nbd.protocol.Nbd;
import dev.rbridge.nbd.server.NbdServerMetrics;
import dev.rbridge.nbd.server.NbdServerState;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;

import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The NBD server's metrics on a Micrometer registry. Every meter of an export is made when its first connection
 * arrives (or at {@link #register}), so the per-request path is array indexing and a few adders.
 *
 * <pre>
 * rbridge_nbd_requests_total{export,op}             requests completed (errors included)
 * rbridge_nbd_request_bytes_total{export,op}        payload bytes of READ and WRITE
 * rbridge_nbd_errors_total{export,op,errno}         requests answered with an error
 * rbridge_nbd_request_duration_seconds{export,op}   histogram, decode to reply queued
 * rbridge_nbd_requests_in_flight{export}            decoded and not yet answered
 * rbridge_nbd_connections{export}                   sessions in transmission
 * rbridge_nbd_protocol_violations_total             sessions closed because the peer broke the protocol
 * rbridge_nbd_connections_refused_total{reason}     new connections turned away: connection_limit, peer_limit
 * rbridge_nbd_connections_closed_total{reason}      connections the server closed: handshake_timeout,
 *                                                   request_timeout, reply_timeout, handshake_evicted,
 *                                                   idle_evicted, stalled_evicted
 * rbridge_nbd_tls_refused_total{reason}             TLS turned away: tls_required (an option in clear where TLS
 *                                                   is required), handshake_failed
 * rbridge_nbd_connections_open                      connections open now, handshaking ones included
 * rbridge_nbd_payload_budget_bytes                  payload memory the server may use at once (--nbd-memory)
 * rbridge_nbd_payload_used_bytes                    payload memory in use now
 * rbridge_nbd_payload_waiting_connections           connections waiting for payload memory now
 * rbridge_nbd_payload_pooled_bytes                  released payload buffers kept for reuse
 * </pre>
 */
public final class NbdMeters implements NbdServerMetrics {
    /** Commands with meters, indexed by command number; DISC has none (it is not answered). */
    private static final int[] COMMANDS = {Nbd.CMD_READ, Nbd.CMD_WRITE, Nbd.CMD_FLUSH, Nbd.CMD_TRIM, Nbd.CMD_CACHE,
            Nbd.CMD_WRITE_ZEROES, Nbd.CMD_BLOCK_STATUS};
    private static final int TABLE = Nbd.CMD_BLOCK_STATUS + 1;
    private static final List<String> REFUSALS = List.of("connection_limit", "peer_limit");
    private static final List<String> CLOSINGS = List.of("handshake_timeout", "request_timeout", "reply_timeout",
            "handshake_evicted", "idle_evicted", "stalled_evicted");

    private final MeterRegistry registry;
    private final Map<String, Export> exports = new ConcurrentHashMap<>();
    private final Counter violations;
    private final Map<String, Counter> refused = new ConcurrentHashMap<>();
    private final Map<String, Counter> closed = new ConcurrentHashMap<>();
    private final Map<String, Counter> tlsRefused = new ConcurrentHashMap<>();

    public NbdMeters(MeterRegistry registry) {
        this.registry = registry;
        this.violations = Counter.builder("rbridge.nbd.protocol.violations")
                .description("NBD sessions closed because the client broke the protocol").register(registry);
        // every reason up front, so a dashboard or alert sees a series at 0 before the first one
        REFUSALS.forEach(this::refusedCounter);
        CLOSINGS.forEach(this::closedCounter);
        List.of("tls_required", "handshake_failed").forEach(this::tlsRefusedCounter);
    }

    private Counter tlsRefusedCounter(String reason) {
        return tlsRefused.computeIfAbsent(reason, r -> Counter.builder("rbridge.nbd.tls.refused").tag("reason", r)
                .description("NBD options or handshakes TLS turned away").register(registry));
    }

    @Override
    public void tlsRefused(String reason) {
        tlsRefusedCounter(reason).increment();
    }

    private Counter refusedCounter(String reason) {
        return refused.computeIfAbsent(reason, r -> Counter.builder("rbridge.nbd.connections.refused").tag("reason", r)
                .description("New NBD connections turned away by a connection limit").register(registry));
    }

    private Counter closedCounter(String reason) {
        return closed.computeIfAbsent(reason, r -> Counter.builder("rbridge.nbd.connections.closed").tag("reason", r)
                .description("NBD connections the server closed: a time limit, or its slot or memory given to others")
                .register(registry));
    }

    @Override
    public void connectionRefused(String reason) {
        refusedCounter(reason).increment();
    }

    @Override
    public void connectionClosed(String reason) {
        closedCounter(reason).increment();
    }

    @Override
    public void serverStarted(NbdServerState state) {
        Gauge.builder("rbridge.nbd.connections.open", state, NbdServerState::connections)
                .description("NBD connections open now, handshaking ones included").strongReference(true)
                .register(registry);
        Gauge.builder("rbridge.nbd.payload.budget", state, NbdServerState::payloadBudgetBytes).baseUnit("bytes")
                .description("Payload memory the NBD server may use at once").strongReference(true).register(registry);
        Gauge.builder("rbridge.nbd.payload.used", state, NbdServerState::payloadUsedBytes).baseUnit("bytes")
                .description("Payload memory in use now: WRITE data received or being stored, READ data fetched or"
                        + " waiting to be sent")
                .strongReference(true).register(registry);
        Gauge.builder("rbridge.nbd.payload.waiting", state, NbdServerState::payloadWaiting).baseUnit("connections")
                .description("NBD connections waiting for payload memory now").strongReference(true)
                .register(registry);
        Gauge.builder("rbridge.nbd.payload.pooled", state, NbdServerState::payloadPooledBytes).baseUnit("bytes")
                .description("Direct memory of released payload buffers kept for reuse (at most a quarter of the"
                        + " budget)")
                .strongReference(true).register(registry);
    }

    /** Makes an export's meters now, so its series exist (at zero) before the first client connects. */
    public void register(String export) {
        export(export);
    }

    @Override
    public ExportMetrics export(String export) {
        return exports.computeIfAbsent(export, Export::new);
    }

    @Override
    public void protocolViolation() {
        violations.increment();
    }

    static String op(int command) {
        return Nbd.commandName(command).toLowerCase(Locale.ROOT);
    }

    private final class Export implements ExportMetrics {
        private final String name;
        private final Counter[] requests = new Counter[TABLE];
        private final Counter[] bytes = new Counter[TABLE];
        private final Timer[] durations = new Timer[TABLE];
        /** By command and errno, all made up front: a dashboard's error panel has series (at 0) to show. */
        private final Counter[][] errors = new Counter[TABLE][];
        private final Map<Long, Counter> unknownCommandErrors = new ConcurrentHashMap<>();
        /** An AtomicLong, not a LongAdder: a LongAdder's sum is no snapshot and could read -1 mid-request. */
        private final AtomicLong inFlight = new AtomicLong();
        private final AtomicLong connections = new AtomicLong();

        Export(String name) {
            this.name = name;
            for (int c : COMMANDS) {
                String op = op(c);
                requests[c] = Counter.builder("rbridge.nbd.requests").tag("export", name).tag("op", op)
                        .description("NBD requests completed, errors included").register(registry);
                if (c == Nbd.CMD_READ || c == Nbd.CMD_WRITE) {
                    bytes[c] = Counter.builder("rbridge.nbd.request.bytes").baseUnit("bytes").tag("export", name)
                            .tag("op", op).description("NBD payload bytes read or written").register(registry);
                }
                errors[c] = new Counter[Errno.values().length];
                for (Errno e : Errno.values()) {
                    errors[c][e.ordinal()] = Counter.builder("rbridge.nbd.errors").tag("export", name).tag("op", op)
                            .tag("errno", e.name()).description("NBD requests answered with an error")
                            .register(registry);
                }
                durations[c] = Timer.builder("rbridge.nbd.request.duration").tag("export", name).tag("op", op)
                        .description("NBD request time from decode to reply queued")
                        .serviceLevelObjectives(Buckets.LATENCY).publishPercentileHistogram(false)
                        .register(registry);
            }
            Gauge.builder("rbridge.nbd.requests.in.flight", inFlight, AtomicLong::get).tag("export", name)
                    .description("NBD requests decoded and not yet answered").strongReference(true).register(registry);
            Gauge.builder("rbridge.nbd.connections", connections, AtomicLong::get).tag("export", name)
                    .description("NBD sessions in transmission").strongReference(true).register(registry);
        }

        @Override
        public void connectionOpened() {
            connections.incrementAndGet();
        }

        @Override
        public void connectionClosed() {
            connections.decrementAndGet();
        }

        @Override
        public void requestStarted(int command) {
            inFlight.incrementAndGet();
        }

        @Override
        public void requestCompleted(int command, long moved, long nanos, Errno error) {
            inFlight.decrementAndGet();
            boolean known = command >= 0 && command < TABLE && requests[command] != null;
            if (!known) {
                // Validation answered a command this server does not know: only an error, under one bounded label.
                if (error != null) {
                    unknownCommandErrors.computeIfAbsent((long) error.code(), k -> Counter.builder("rbridge.nbd.errors")
                            .tag("export", name).tag("op", "unknown").tag("errno", error.name())
                            .description("NBD requests answered with an error").register(registry)).increment();
                }
                return;
            }
            requests[command].increment();
            durations[command].record(nanos, TimeUnit.NANOSECONDS);
            if (error == null) {
                Counter b = bytes[command];
                if (b != null) {
                    b.increment(moved);
                }
            } else {
                errors[command][error.ordinal()].increment();
            }
        }
    }
}
