package dev.rbridge.cli;

import dev.rbridge.bridge.Bridge;
import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.nbd.server.Export;
import dev.rbridge.nbd.server.ListenAddress;
import dev.rbridge.nbd.server.NbdServer;
import dev.rbridge.nbd.server.NbdServerConfig;
import dev.rbridge.ops.admin.BridgeAdminHttpServer;
import dev.rbridge.ops.http.OpsHttpMetrics;
import dev.rbridge.ops.metrics.BridgeMeters;
import dev.rbridge.ops.metrics.MetricsHttpServer;
import dev.rbridge.ops.metrics.NbdMeters;
import dev.rbridge.ops.metrics.OpsHttpMeters;
import dev.rbridge.ops.metrics.Readiness;
import dev.rbridge.ops.metrics.Telemetry;
import dev.rbridge.rdma.tcp.TcpCongestion;

import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A bridge process, the wiring serve and demo share: a started {@link Bridge}'s volumes served over NBD, its metrics
 * and readiness, its admin interface, and the order things stop in on SIGTERM. {@link #run} takes the steps in order;
 * what fails on the way is closed again and reported as one line.
 */
final class BridgeProcess {
    private final String name;
    private final Bridge bridge;
    private final BridgeProcessOptions options;
    private final OpsEndpointOptions ops;
    private final Telemetry telemetry;
    private final Runnable afterBridge;
    /** Set once the NBD server listens; the readiness check reads it. */
    private final AtomicReference<NbdServer> listening = new AtomicReference<>();
    private final AtomicBoolean stopping = new AtomicBoolean();
    private MetricsHttpServer metricsServer;
    private BridgeAdminHttpServer adminServer;

    /**
     * @param name        the command ({@code serve}, {@code demo}): it starts every line this process prints
     * @param telemetry   this process's metrics, which the bridge already reports to; null without metrics
     * @param afterBridge what stops after the bridge (demo: its memservers)
     */
    BridgeProcess(String name, Bridge bridge, BridgeProcessOptions options, OpsEndpointOptions ops,
            Telemetry telemetry, Runnable afterBridge) {
        this.name = name;
        this.bridge = bridge;
        this.options = options;
        this.ops = ops;
        this.telemetry = telemetry;
        this.afterBridge = afterBridge;
    }

    /**
     * Serves until SIGTERM and returns the exit code: 0 after a graceful stop, 1 (with one line on {@code err}) when
     * an endpoint cannot start; the bridge is then closed, with what comes after it.
     */
    int run(PrintWriter err) throws InterruptedException {
        NbdServer server;
        try {
            NbdServerConfig.Builder nbd = nbdLimits();
            if (telemetry != null) {
                bindMeters(nbd);
                checkReadiness();
                metricsServer = ops.startMetrics(telemetry);
            }
            NbdServerConfig config = exportVolumes(nbd).build();
            adminServer = startAdmin();
            server = NbdServer.start(config);
            stopOnSigterm(server);
            // READY=1 before /readyz says ready: whoever reacts to readiness with a stop must find READY sent first.
            SystemdNotify.ready("serving " + server.addresses().size() + " NBD listener(s), "
                    + bridge.volumes().size() + " volume(s)");
            listening.set(server);
            announce(server, config);
        } catch (IOException | IllegalArgumentException | UncheckedIOException e) {
            closeAfterFailedStart();
            err.println(name + ": " + e.getMessage());
            return 1;
        }
        server.awaitTermination();
        return 0;
    }

    /** The NBD server's limits and listeners; its sockets get the bridge's TCP congestion control. */
    private NbdServerConfig.Builder nbdLimits() {
        String congestion = bridge.config().tcpCongestion();
        return options.limits.apply(NbdServerConfig.builder().tls(options.tls.settings()))
                .payloadMemory(bridge.payloadMemory())
                .tcpSocketSetup(ch -> TcpCongestion.apply(ch, congestion));
    }

    /** NBD and bridge meters; every export's series exist before the first client. */
    private void bindMeters(NbdServerConfig.Builder nbd) {
        NbdMeters nbdMeters = new NbdMeters(telemetry.registry());
        bridge.volumes().forEach(v -> nbdMeters.register(v.spec().name()));
        nbd.metrics(nbdMeters);
        if (bridge.config().metrics() instanceof BridgeMeters m) {
            m.bind(bridge);
        }
    }

    /** Ready once NBD listens, while the bridge can serve every volume, and until SIGTERM. */
    private void checkReadiness() {
        telemetry.readinessCheck(() -> Readiness.nbdServer(listening.get()));
        telemetry.readinessCheck(() -> Readiness.bridge(bridge));
        telemetry.readinessCheck(() -> Readiness.stopping(stopping.get()));
    }

    /** One export per volume, on every listener. */
    private NbdServerConfig.Builder exportVolumes(NbdServerConfig.Builder nbd) {
        options.listen.addresses().forEach(nbd::listen);
        int maxPayload = options.limits.maxPayloadBytes();
        for (Volume v : bridge.volumes()) {
            VolumeSpec s = v.spec();
            nbd.export(new Export(s.name(), s.description(), v, s.readOnly(), s.minimumBlockSize(),
                    Math.max(Export.DEFAULT_PREFERRED_BLOCK_SIZE, s.minimumBlockSize()), maxPayload));
        }
        return nbd;
    }

    /** The admin interface, or null with {@code --admin none}; its refusals and connections are counted. */
    private BridgeAdminHttpServer startAdmin() throws IOException {
        InetSocketAddress address = ops.adminAddress();
        if (address == null) {
            return null;
        }
        OpsHttpMeters meters = telemetry == null ? null : new OpsHttpMeters(telemetry.registry(), "admin");
        BridgeAdminHttpServer admin = new BridgeAdminHttpServer(address, bridge,
                meters == null ? OpsHttpMetrics.NONE : meters);
        if (meters != null) {
            meters.bindConnections(admin::openConnections);
        }
        return admin;
    }

    /**
     * On SIGTERM: not ready any more; NBD stops accepting and drains in-flight requests (--drain-timeout); then the
     * ops endpoints close; then the bridge (its leases given back); then what comes after it.
     */
    private void stopOnSigterm(NbdServer server) {
        BridgeAdminHttpServer admin = adminServer;
        MetricsHttpServer metrics = metricsServer;
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping.set(true);
            SystemdNotify.stopping();
            server.close();
            if (admin != null) {
                admin.close();
            }
            if (metrics != null) {
                metrics.close();
            }
            bridge.close();
            afterBridge.run();
        }, "shutdown"));
        GracefulStop.onTerm();
    }

    /** Where it serves, one line each, on stdout: scripts and tests wait for these lines. */
    private void announce(NbdServer server, NbdServerConfig config) {
        for (ListenAddress a : server.addresses()) {
            String uri = a.uri(config.defaultExport());
            if (config.tls().required()) { // the URI a client must use: nbds:// (libnbd, qemu)
                uri = uri.replaceFirst("^nbd", "nbds");
            }
            System.out.println("rbridge " + name + ": serving " + uri + (config.tls().mode()
                    == dev.rbridge.nbd.tls.TlsMode.ON ? " (TLS offered: nbds:// too)" : ""));
        }
        if (adminServer != null) {
            System.out.println("rbridge " + name + ": admin http://" + adminServer.address().getHostString() + ":"
                    + adminServer.address().getPort() + "/");
        }
        if (metricsServer != null) {
            System.out.println("rbridge " + name + ":" + MetricsEndpoint.describe(metricsServer));
        }
        System.out.flush();
    }

    private void closeAfterFailedStart() {
        if (adminServer != null) {
            adminServer.close();
        }
        if (metricsServer != null) {
            metricsServer.close();
        }
        bridge.close();
        afterBridge.run();
    }
}
