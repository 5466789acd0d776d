package dev.rbridge.bridge.cli;

import dev.rbridge.nbd.server.NbdServerConfig;
import picocli.CommandLine.Option;

import java.time.Duration;

/**
 * The NBD server's limits, shared by {@code serve} and {@code demo}: what one client may hold (connections, payload
 * memory, time) so that no client can hurt another. Defaults come from {@link NbdServerConfig}.
 */
final class NbdServerOptions {
    @Option(names = "--max-payload", paramLabel = "SIZE", defaultValue = "32M",
            description = "Largest NBD READ or WRITE accepted. Default ${DEFAULT-VALUE}.")
    String maxPayload;

    @Option(names = "--nbd-memory", paramLabel = "SIZE", defaultValue = "512M",
            description = "Payload memory the NBD server uses at once (WRITE data being received or stored, READ data"
                    + " being fetched or sent); half of it may go to one client address, a quarter to one connection."
                    + " Requests beyond it wait, they do not fail. At least --max-payload. Default ${DEFAULT-VALUE}.")
    String nbdMemory;

    @Option(names = "--max-connections", paramLabel = "N", defaultValue = "" + NbdServerConfig.MAX_CONNECTIONS,
            description = "NBD connections at once. When full, the longest-idle connection of the address with the"
                    + " most takes the new one's place; if none is idle, the new one is refused."
                    + " Default ${DEFAULT-VALUE}.")
    int maxConnections;

    @Option(names = "--max-connections-per-peer", paramLabel = "N",
            defaultValue = "" + NbdServerConfig.MAX_CONNECTIONS_PER_PEER,
            description = "NBD connections at once from one address; beyond it, that address's longest-idle"
                    + " connection gives up its place (or the new one is refused). Default ${DEFAULT-VALUE}.")
    int maxConnectionsPerPeer;

    @Option(names = "--handshake-timeout", paramLabel = "SECONDS", defaultValue = "10",
            description = "Close an NBD connection that has not finished its handshake by then. Default ${DEFAULT-VALUE}.")
    double handshakeTimeout;

    @Option(names = "--request-timeout", paramLabel = "SECONDS", defaultValue = "30",
            description = "Close an NBD connection when a request (header and WRITE data) has not arrived whole this"
                    + " long after its first byte. Idle connections are never timed out. Default ${DEFAULT-VALUE}.")
    double requestTimeout;

    @Option(names = "--reply-timeout", paramLabel = "SECONDS", defaultValue = "60",
            description = "Close an NBD connection whose client has read none of its waiting replies for this long."
                    + " Default ${DEFAULT-VALUE}.")
    double replyTimeout;

    @Option(names = "--drain-timeout", paramLabel = "SECONDS", defaultValue = "10",
            description = "On shutdown, how long in-flight requests may take to finish. Default ${DEFAULT-VALUE}.")
    double drainTimeout;

    int maxPayloadBytes() {
        long n = Sizes.parse(maxPayload);
        if (n < 4096 || n > 1 << 30) {
            throw new IllegalArgumentException("--max-payload must be between 4K and 1G: " + maxPayload);
        }
        return (int) n;
    }

    /** Throws IllegalArgumentException naming the option when one is wrong. */
    void validate() {
        apply(NbdServerConfig.builder());
    }

    /** Sets every limit on {@code b}; throws IllegalArgumentException naming the option when one is wrong. */
    NbdServerConfig.Builder apply(NbdServerConfig.Builder b) {
        long memory = Sizes.parse(nbdMemory);
        if (memory < maxPayloadBytes()) {
            throw new IllegalArgumentException("--nbd-memory (" + nbdMemory + ") must be at least --max-payload ("
                    + maxPayload + ")");
        }
        if (maxConnections < 1 || maxConnectionsPerPeer < 1) {
            throw new IllegalArgumentException("--max-connections and --max-connections-per-peer must be at least 1");
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
