package dev.rbridge.ops.admin;

import dev.rbridge.ops.http.ErrorPage;
import dev.rbridge.ops.http.OpsHttpConfig;
import dev.rbridge.ops.http.OpsHttpMetrics;
import dev.rbridge.ops.http.OpsHttpServer;
import dev.rbridge.ops.http.Routes;

import java.io.IOException;
import java.net.InetSocketAddress;

/** The ops HTTP server an admin interface (the bridge's, a memserver's) runs on: named admin, JSON error pages. */
final class AdminHttp {
    private AdminHttp() {}

    /**
     * Serves {@code routes} on {@code address} until the server is closed.
     *
     * @param hint what the operator can do about an address that cannot be served, added to that message (or "")
     * @throws IOException naming the address when it cannot be bound
     */
    static OpsHttpServer start(InetSocketAddress address, Routes routes, OpsHttpMetrics metrics, String hint)
            throws IOException {
        try {
            return OpsHttpServer.start(OpsHttpConfig.builder("admin", address).errorPage(ErrorPage.JSON).build(),
                    routes, metrics);
        } catch (IOException e) {
            throw new IOException("cannot serve admin on " + address.getHostString() + ":" + address.getPort() + ": "
                    + e.getMessage() + hint, e);
        }
    }
}
