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
                    + " memservers and the NBD connections it accepts)" + MemserverClientOptions.TCP_CONGESTION_HELP)
    String tcpCongestion;

    @Mixin
    LogLevelOption.Server logLevel;

    @Mixin
    SwapSafetyOptions swapSafety;

    @Option(names = "--insecure",
            description = "Serve NBD in clear, or without client authentication, on an address other hosts reach: "
                    + "anyone there can then read and write the volumes. Without it, a --listen address that is not"
                    + " loopback needs --tls require with --tls-psk or --tls-certificates and --tls-verify-peer.")
    boolean insecure;

    /**
     * Refuses, with the flags to add, NBD on an address other hosts reach where clients are not authenticated
     * (TLS required, with PSK or client certificates), unless {@code --insecure}.
     */
    void checkExposure(String command) {
        dev.rbridge.nbd.server.ListenAddress.Tcp open = Exposure.exposed(listen.addresses());
        if (open == null || insecure || tls.authenticatesClients()) {
            return;
        }
        throw new IllegalArgumentException(command + " would serve NBD on " + open + ", which other hosts reach,"
                + " to anyone who connects: add --tls require with --tls-psk FILE (or --tls-certificates DIR"
                + " --tls-verify-peer), or --insecure to serve it open on purpose");
    }
}
