package dev.rbridge.cli;

import dev.rbridge.ops.metrics.MetricsHttpServer;
import dev.rbridge.ops.metrics.Telemetry;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.BindException;

/** Starts what {@code --metrics HOST:PORT|none} asks for (see {@link OpsEndpointOptions}). */
final class MetricsEndpoint {
    private static final Logger log = LoggerFactory.getLogger(MetricsEndpoint.class);

    private MetricsEndpoint() {}

    /**
     * Starts the endpoint, or returns null for {@code none} and for a taken default port (logged).
     *
     * @throws IOException with a sentence naming the address and the option when an explicit address cannot be used
     */
    static MetricsHttpServer start(String option, String defaultValue, int defaultPort, Telemetry telemetry)
            throws IOException {
        if (option.equals(Defaults.OFF)) {
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
        return http == null ? ""
                : " metrics http://" + http.address().getHostString() + ":" + http.address().getPort()
                        + "/metrics";
    }
}
