package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.RemoteOpMetrics;

/**
 * What the bridge core reports as it works, bound to a registry at the edge ({@code dev.rbridge.ops.metrics}); the
 * core never imports one. State that is cheap to read when asked (volume and slab health, memserver reachability,
 * rebuild totals) is not pushed through here: a binding polls {@link Bridge} at scrape time.
 */
public interface BridgeMetrics {
    BridgeMetrics NONE = new BridgeMetrics() {
    };

    /** The recorder for remote operations on one memserver, asked once per memserver when the bridge starts. */
    default RemoteOpMetrics memserver(String label) {
        return RemoteOpMetrics.NONE;
    }
}
