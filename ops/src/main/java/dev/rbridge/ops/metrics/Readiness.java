package dev.rbridge.ops.metrics;

import dev.rbridge.bridge.Bridge;
import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.bridge.volume.VolumeState;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.nbd.server.NbdServer;
import dev.rbridge.ops.metrics.Telemetry.Problem;

import java.util.ArrayList;
import java.util.List;

/**
 * The readiness rules of each role, what {@code /readyz} reports: a fatal problem makes the process not ready (503),
 * a warning is listed while it still serves. A process registers the rules of the roles it runs with
 * {@link Telemetry#readinessCheck}.
 */
public final class Readiness {
    /** How long an ENOSPC stays listed among the warnings. */
    private static final long OUT_OF_SPACE_SHOWN_NANOS = java.util.concurrent.TimeUnit.MINUTES.toNanos(5);

    private Readiness() {}

    /** The bridge is ready when it has memservers to talk to and every volume can serve all of its bytes. */
    public static List<Problem> bridge(Bridge bridge) {
        List<Problem> out = new ArrayList<>();
        int reachable = 0;
        List<MemserverLink> links = bridge.memservers();
        for (MemserverLink l : links) {
            if (l.connection() != null) {
                reachable++;
            } else {
                out.add(Problem.warning("memserver " + l.label() + " unreachable"
                        + (l.lastError().isEmpty() ? "" : ": " + l.lastError())));
            }
        }
        if (reachable == 0) {
            out.add(Problem.fatal("no memserver reachable (of " + links.size() + ")"));
        }
        Bridge.Commitment c = bridge.commitment();
        if (reachable > 0 && c.overcommitted()) {
            out.add(Problem.warning("over-committed: the volumes need " + c.provisionedBytes() + " bytes when full"
                    + " (size x replicas), the memservers up lend " + c.liveCapacityBytes()));
        }
        for (Volume v : bridge.volumes()) {
            Volume.VolumeStatus s = v.status();
            if (v.outOfSpaceWithin(OUT_OF_SPACE_SHOWN_NANOS)) {
                out.add(Problem.warning("volume " + s.name() + ": writes failed with ENOSPC in the last 5 minutes"
                        + " (no memserver had room for a new slab)"));
            }
            if (v.fenced() != null) {
                out.add(Problem.warning("volume " + s.name() + " fenced, failing with EIO: " + v.fenced()));
            } else if (s.lost() > 0) {
                out.add(Problem.fatal("volume " + s.name() + ": " + s.lost() + " slab(s) without a live replica"));
            } else if (s.state() != VolumeState.HEALTHY) {
                out.add(Problem.warning("volume " + s.name() + " " + s.state().label() + " (" + s.degraded()
                        + " degraded, " + s.rebuilding() + " rebuilding)"));
            }
        }
        return out;
    }

    /** The NBD server serves once it is listening ({@code server} null: not yet) and while every listener runs. */
    public static List<Problem> nbdServer(NbdServer server) {
        if (server == null) {
            return List.of(Problem.fatal("NBD listeners not up yet"));
        }
        return server.failures().entrySet().stream()
                .map(e -> Problem.fatal("NBD server: the " + e.getKey() + " ended: " + e.getValue())).toList();
    }

    /**
     * A memserver is ready unless it says why not (draining, a listener that takes no new clients); one whose remote keys
     * the NIC does not enforce is ready, with a warning: fencing there waits a grace period (docs/transports.md).
     */
    public static List<Problem> memserver(Memserver server) {
        List<Problem> out = new ArrayList<>(2);
        String why = server.notReadyReason();
        if (why != null) {
            out.add(Problem.fatal(why));
        }
        dev.rbridge.rdma.KeyEnforcement keys = server.keysEnforced();
        if (!keys.enforced()) {
            out.add(Problem.warning("remote keys not NIC-enforced (a grace period is kept after fencing): "
                    + keys.reason()));
        }
        return out;
    }

    /** A process that is shutting down is not ready, so that probes stop sending work before its listeners close. */
    public static List<Problem> stopping(boolean stopping) {
        return stopping ? List.of(Problem.fatal("shutting down")) : List.of();
    }
}
