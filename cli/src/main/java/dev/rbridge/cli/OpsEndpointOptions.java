package dev.rbridge.cli;

import dev.rbridge.ops.metrics.MetricsHttpServer;
import dev.rbridge.ops.metrics.Telemetry;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.net.InetSocketAddress;

/**
 * A server process's operator endpoints: {@code --admin} (its admin interface) and {@code --metrics} ({@code /metrics},
 * {@code /healthz}, {@code /readyz}). The variant a command mixes in gives the defaults: {@link Serve}, {@link Demo},
 * {@link Memserver}. The {@code --admin} text is serve's; demo and memserver give theirs in their help bundle.
 */
class OpsEndpointOptions {
    @Option(names = "--admin", paramLabel = "HOST:PORT|none",
            description = "Operator interface (JSON over HTTP) for rbridge admin --bridge: volumes, slabs,"
                    + " memservers, rebuilds; adding, draining and removing memservers, growing volumes (those need the"
                    + " token). 'none'"
                    + " turns it off. Needs the memservers' token when one is set, taken from loopback peers only;"
                    + " requests from web pages (an Origin header) and, on loopback, requests for a Host that is not"
                    + " a loopback name are refused. Default ${DEFAULT-VALUE}.")
    String admin;

    @Option(names = "--metrics", paramLabel = "HOST:PORT|none",
            description = "Serve Prometheus metrics at http://HOST:PORT/metrics, with /healthz and /readyz;"
                    + " 'none' turns it off. When the default port is taken (another rbridge on this host) the process"
                    + " runs without metrics and says so; an address given explicitly must be free."
                    + " Default ${DEFAULT-VALUE}.")
    String metrics;

    private final int adminPort;
    private final String metricsDefault;
    private final int metricsPort;

    private OpsEndpointOptions(String admin, int adminPort, String metrics, int metricsPort) {
        this.admin = admin;
        this.adminPort = adminPort;
        this.metrics = metrics;
        this.metricsDefault = metrics;
        this.metricsPort = metricsPort;
    }

    /** The admin interface's address, or null for {@code none}; IllegalArgumentException when it is not one. */
    InetSocketAddress adminAddress() {
        return admin.equals(Defaults.OFF) ? null : Endpoints.parse(admin, adminPort);
    }

    /** This process's metrics, or null for {@code --metrics none}. */
    Telemetry telemetry() {
        return metrics.equals(Defaults.OFF) ? null : new Telemetry();
    }

    /**
     * Serves {@code telemetry} (null: none), or returns null for {@code none} and for a taken default port (logged).
     *
     * @throws IOException with a sentence naming the address and the option when an explicit address cannot be used
     */
    MetricsHttpServer startMetrics(Telemetry telemetry) throws IOException {
        return telemetry == null ? null : MetricsEndpoint.start(metrics, metricsDefault, metricsPort, telemetry);
    }

    /** rbridge serve: the bridge's ports. */
    static final class Serve extends OpsEndpointOptions {
        Serve() {
            super(Defaults.BRIDGE_ADMIN, Defaults.BRIDGE_ADMIN_PORT, Defaults.BRIDGE_METRICS,
                    Defaults.BRIDGE_METRICS_PORT);
        }
    }

    /** rbridge demo: the bridge's ports, admin off unless asked for. */
    static final class Demo extends OpsEndpointOptions {
        Demo() {
            super(Defaults.OFF, Defaults.BRIDGE_ADMIN_PORT, Defaults.BRIDGE_METRICS, Defaults.BRIDGE_METRICS_PORT);
        }
    }

    /** rbridge memserver: the memserver's ports. */
    static final class Memserver extends OpsEndpointOptions {
        Memserver() {
            super(Defaults.MEMSERVER_ADMIN, Defaults.MEMSERVER_ADMIN_PORT, Defaults.MEMSERVER_METRICS,
                    Defaults.MEMSERVER_METRICS_PORT);
        }
    }
}
