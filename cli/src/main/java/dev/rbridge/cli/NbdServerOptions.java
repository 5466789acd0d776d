package dev.rbridge.cli;

import com.sun.management.HotSpotDiagnosticMXBean;
import dev.rbridge.nbd.server.NbdServerConfig;
import picocli.CommandLine.Option;

import java.lang.management.ManagementFactory;
import java.time.Duration;

/**
 * The NBD server's limits, shared by {@code serve} and {@code demo}: what one client may hold (connections, payload
 * memory, time) so that no client can hurt another. Defaults come from {@link NbdServerConfig}.
 */
final class NbdServerOptions {
    @Option(names = "--max-payload", paramLabel = "SIZE", defaultValue = Defaults.MAX_PAYLOAD,
            description = "Largest NBD READ or WRITE accepted. Default ${DEFAULT-VALUE}.")
    String maxPayload;

    @Option(names = "--nbd-memory", paramLabel = "SIZE",
            description = "Payload memory the NBD server uses at once (WRITE data being received or stored, READ data"
                    + " being fetched or sent); half of it may go to one client address, a quarter to one connection."
                    + " Requests beyond it wait, they do not fail. At least --max-payload. Default 512M, or less when"
                    + " the JVM's direct memory (RBRIDGE_MAX_DIRECT, 2g) is too small for it.")
    String nbdMemory;

    @Option(names = "--max-connections", paramLabel = "N", defaultValue = "" + NbdServerConfig.MAX_CONNECTIONS,
            description = "NBD connections at once. When full, a new connection takes the place of one still in its"
                    + " handshake (of the address holding the most), or else, once its own handshake is through, of"
                    + " the longest-idle session of the address holding the most; if none is idle, it is refused."
                    + " Default ${DEFAULT-VALUE}.")
    int maxConnections;

    @Option(names = "--max-connections-per-peer", paramLabel = "N",
            defaultValue = "" + NbdServerConfig.MAX_CONNECTIONS_PER_PEER,
            description = "NBD connections at once from one address (IPv6: one /64); beyond it, a new connection"
                    + " takes the place of that address's oldest one still in its handshake, or else, once its own"
                    + " handshake is through, of its longest-idle session; it is refused when none is idle."
                    + " Default ${DEFAULT-VALUE}.")
    int maxConnectionsPerPeer;

    @Option(names = "--handshake-timeout", paramLabel = "SECONDS",
            defaultValue = "" + NbdServerConfig.HANDSHAKE_TIMEOUT_SECONDS,
            description = "Close an NBD connection that has not finished its handshake by then. Default ${DEFAULT-VALUE}.")
    double handshakeTimeout;

    @Option(names = "--request-timeout", paramLabel = "SECONDS",
            defaultValue = "" + NbdServerConfig.REQUEST_TIMEOUT_SECONDS,
            description = "Close an NBD connection when a request (header and WRITE data) has not arrived whole this"
                    + " long after its first byte. Idle connections are never timed out. Default ${DEFAULT-VALUE}.")
    double requestTimeout;

    @Option(names = "--reply-timeout", paramLabel = "SECONDS",
            defaultValue = "" + NbdServerConfig.REPLY_TIMEOUT_SECONDS,
            description = "Close an NBD connection whose client has read none of its waiting replies for this long."
                    + " Default ${DEFAULT-VALUE}.")
    double replyTimeout;

    @Option(names = "--drain-timeout", paramLabel = "SECONDS",
            defaultValue = "" + NbdServerConfig.DRAIN_TIMEOUT_SECONDS,
            description = "On shutdown, how long in-flight requests may take to finish. Default ${DEFAULT-VALUE}.")
    double drainTimeout;

    /** Direct memory outside the payload budget and the connections: memserver links, the JDK's own buffers. */
    private static final long DIRECT_BASE = 64L << 20;

    /**
     * Direct memory outside the payload budget: what every connection may hold (with {@code tls}, its TLS buffers
     * too, which a connection gets before any certificate or key is checked), plus {@link #DIRECT_BASE}.
     */
    private long directReserve(boolean tls) {
        return DIRECT_BASE + maxConnections * NbdServerConfig.directBytesPerConnection(tls);
    }

    /** The JVM's direct memory limit, or 0 when it cannot be told. */
    private static long maxDirectMemory() {
        try {
            String v = ManagementFactory.getPlatformMXBean(HotSpotDiagnosticMXBean.class)
                    .getVMOption("MaxDirectMemorySize").getValue();
            long n = Long.parseLong(v);
            return n > 0 ? n : Runtime.getRuntime().maxMemory(); // 0: the JVM's default, the heap's size
        } catch (RuntimeException e) {
            return 0;
        }
    }

    int maxPayloadBytes() {
        long n = Sizes.parse(maxPayload);
        if (n < 4096 || n > 1 << 30) {
            throw new IllegalArgumentException("--max-payload must be between 4K and 1G: " + maxPayload);
        }
        return (int) n;
    }

    /** Throws IllegalArgumentException naming the option when one is wrong; {@code tls}: the NBD TLS settings. */
    void validate(dev.rbridge.nbd.tls.NbdTls tls) {
        apply(NbdServerConfig.builder().tls(tls));
    }

    /**
     * Sets every limit on {@code b} (its TLS settings given first: with TLS, connections hold more memory); throws
     * IllegalArgumentException naming the option when one is wrong.
     */
    NbdServerConfig.Builder apply(NbdServerConfig.Builder b) {
        if (maxConnections < 1 || maxConnectionsPerPeer < 1) {
            throw new IllegalArgumentException("--max-connections and --max-connections-per-peer must be at least 1");
        }
        long direct = maxDirectMemory();
        boolean tls = b.tls().enabled();
        long reserve = directReserve(tls);
        String connections = Sizes.format(reserve) + " for connections" + (tls ? " (with their TLS buffers)" : "");
        long memory = nbdMemory != null ? Sizes.parse(nbdMemory)
                : direct > 0 ? Math.min(NbdServerConfig.PAYLOAD_BUDGET, (direct - reserve) * 4 / 5)
                        : NbdServerConfig.PAYLOAD_BUDGET;
        String given = nbdMemory != null ? nbdMemory : Sizes.format(memory) + " (the default for this JVM)";
        if (memory < maxPayloadBytes()) {
            throw new IllegalArgumentException(nbdMemory != null
                    ? "--nbd-memory " + given + " must be at least --max-payload (" + maxPayload + ")"
                    : "this JVM's " + Sizes.format(direct) + " of direct memory leave too little for NBD payloads"
                            + " (--max-payload " + maxPayload + " and " + connections + "):"
                            + " raise RBRIDGE_MAX_DIRECT (the launcher's -XX:MaxDirectMemorySize), e.g. to 1g");
        }
        if (direct > 0 && memory + memory / 4 > direct - reserve) {
            throw new IllegalArgumentException("--nbd-memory " + given + " (and the quarter more kept idle for"
                    + " reuse) does not fit in this JVM's " + Sizes.format(direct) + " of direct memory, of which "
                    + connections + " and memserver links are kept: lower it, or"
                    + " raise RBRIDGE_MAX_DIRECT (the launcher's -XX:MaxDirectMemorySize)");
        }
        return b.payloadBudget(memory)
                .maxConnections(maxConnections)
                .maxConnectionsPerPeer(maxConnectionsPerPeer)
                .handshakeTimeout(seconds("--handshake-timeout", handshakeTimeout))
                .requestTimeout(seconds("--request-timeout", requestTimeout))
                .replyTimeout(seconds("--reply-timeout", replyTimeout))
                .drainTimeout(seconds("--drain-timeout", drainTimeout));
    }

    private static Duration seconds(String option, double s) {
        return ServeCommand.seconds(option, s);
    }
}
