package dev.rbridge.bridge.cli;

import dev.rbridge.memserver.MemServerConfig;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Providers;
import dev.rbridge.rdma.RemoteMemoryProvider;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.time.Duration;

/** How a command reaches a memserver: the options ping, bench and mem share (a picocli mixin). */
final class MemServerClientOptions {
    @Option(names = "--server", paramLabel = "HOST:PORT", required = true, description = "The memserver.")
    String server;

    @Option(names = "--token", paramLabel = "SECRET", description = "Shared secret of the memserver.")
    String token;

    @Option(names = "--token-file", paramLabel = "FILE", description = "Read the secret from the first line of FILE.")
    Path tokenFile;

    @Option(names = "--timeout", paramLabel = "SECONDS", defaultValue = "5",
            description = "Declare the memserver dead after this long without an answer. Default ${DEFAULT-VALUE}.")
    int timeout;

    @Option(names = "--transport", paramLabel = "NAME", defaultValue = "tcp",
            description = "Remote-memory transport: tcp. Default ${DEFAULT-VALUE}.")
    String transport;

    @Option(names = "--log-level", paramLabel = "LEVEL", defaultValue = "warn",
            description = "error, warn, info, debug or trace. Default ${DEFAULT-VALUE}.")
    String logLevel;

    /** The transport to connect with, or IllegalArgumentException naming the ones that work from a command. */
    RemoteMemoryProvider provider() {
        if (transport.equals("local")) {
            throw new IllegalArgumentException("the local transport exists only inside one process (rbridge demo); "
                    + "use --transport tcp to reach a memserver");
        }
        return Providers.byName(transport);
    }

    /** The connect parameters, or IllegalArgumentException naming what is wrong with the options. */
    ConnectParams params(String clientName) {
        if (timeout <= 0) {
            throw new IllegalArgumentException("--timeout must be positive");
        }
        return new ConnectParams().address(Endpoints.parse(server, MemServerConfig.DEFAULT_PORT))
                .token(Endpoints.token(token, tokenFile)).clientName(clientName)
                .operationTimeout(Duration.ofSeconds(timeout));
    }
}
