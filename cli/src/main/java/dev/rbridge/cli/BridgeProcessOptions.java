package dev.rbridge.cli;

import dev.rbridge.rdma.ConnectParams;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * The options serve and demo share, for the part of them that is a bridge process: where NBD listens and with what
 * limits, the TCP congestion control of its sockets, its log level. Their operator endpoints are an
 * {@link OpsEndpointOptions} of their own, as their defaults differ.
 */
final class BridgeProcessOptions {
    @Mixin
    NbdListenOptions listen;

    @Mixin
    NbdServerOptions limits;

    @Mixin
    NbdTlsOptions tls;

    @Option(names = "--tcp-congestion", paramLabel = "NAME", defaultValue = ConnectParams.TCP_CONGESTION_DEFAULT,
            description = "TCP congestion control of this bridge's sockets (its tcp-transport connections to"
                    + " memservers and the NBD connections it accepts)" + MemServerClientOptions.TCP_CONGESTION_HELP)
    String tcpCongestion;

    @Mixin
    LogLevelOption.Server logLevel;
}
