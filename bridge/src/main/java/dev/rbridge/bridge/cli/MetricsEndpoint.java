package dev.rbridge.bridge.cli;

import dev.rbridge.bridge.Bridge;
import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.metrics.MetricsHttpServer;
import dev.rbridge.bridge.metrics.Telemetry;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.bridge.volume.VolumeState;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.BindException;
import java.util.ArrayList;
import java.util.List;

/** The {@code --metrics HOST:PORT|none} option of serve, demo and memserver. */
final class MetricsEndpoint {
    private static final Logger log = LoggerFactory.getLogger(MetricsEndpoint.class);

    static final String DEFAULT_MEMSERVER = "127.0.0.1:7474";
    static final String DEFAULT_BRIDGE = "127.0.0.1:7475";
    static final String HELP = "Serve Prometheus metrics at http://HOST:PORT/metrics, with /healthz and /readyz;"
            + " 'none' turns it off. When the default port is taken (another rbridge on this host) the process runs"
            + " without metrics and says so; an address given explicitly must be free. Default ${DEFAULT-VALUE}.";

    private MetricsEndpoint() {
    }

    /**
     * Starts the endpoint, or returns null for {@code none} and for a taken default port (logged).
     *
     * @throws IOException with a sentence naming the address and the option when an explicit address cannot be used
     */
    static MetricsHttpServer start(String option, String defaultValue, int defaultPort, Telemetry telemetry)
            throws IOException {
        if (option.equals("none")) {
            return null;
        }
        var address = Endpoints.parse(option, defaultPort);
        try {
            return new MetricsHttpServer(address, telemetry);
        } catch (IOException e) {
            String where = address.getHostString() + ":" + address.getPort();
            if (option.equals(defaultValue) && e instanceof BindException) {
                log.warn("metrics not served: the default address {} is taken ({}); pass --metrics HOST:PORT to"
                        + " serve them elsewhere, or --metrics none", where, e.getMessage());
                return null;
            }
            throw new IOException("cannot serve metrics on " + where + ": " + e.getMessage()
                    + " (use --metrics HOST:PORT or none)", e);
        }
    }

    static String describe(MetricsHttpServer http) {
        return http == null ? "" : " metrics http://" + http.address().getHostString() + ":" + http.address().getPort()
                + "/metrics";
    }

    /** The bridge is ready when it has memservers to talk to and every volume can serve all of its bytes. */
    static List<Telemetry.Problem> bridgeReadiness(Bridge bridge) {
        List<Telemetry.Problem> out = new ArrayList<>();
        int reachable = 0;
        List<MemserverLink> links = bridge.memservers();
        for (MemserverLink l : links) {
            if (l.connection() != null) {
                reachable++;
            } else {
                out.add(Telemetry.Problem.warning("memserver " + l.label() + " unreachable"
                        + (l.lastError().isEmpty() ? "" : ": " + l.lastError())));
            }
        }
        if (reachable == 0) {
            out.add(Telemetry.Problem.fatal("no memserver reachable (of " + links.size() + ")"));
        }
        for (Volume v : bridge.volumes()) {
            Volume.VolumeStatus s = v.status();
            if (v.fenced() != null) {
                out.add(Telemetry.Problem.warning("volume " + s.name() + " fenced, failing with EIO: " + v.fenced()));
            } else if (s.lost() > 0) {
                out.add(Telemetry.Problem.fatal("volume " + s.name() + ": " + s.lost()
                        + " slab(s) without a live replica"));
            } else if (s.state() != VolumeState.HEALTHY) {
                out.add(Telemetry.Problem.warning("volume " + s.name() + " " + s.state().label() + " (" + s.degraded()
                        + " degraded, " + s.rebuilding() + " rebuilding)"));
            }
        }
        return out;
    }
}
