package dev.rbridge.bridge;

import dev.rbridge.bridge.LeaseKeeper.LeaseWait;
import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Replica;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.Map;

/**
 * A memserver coming back while the bridge serves: each region is judged against what the volumes serve now, its
 * manifest copies are written at once, and a lease held by another connection is waited out or fences the volume
 * ({@link LeaseKeeper#refusedOnReconnect}).
 */
final class Reconnect implements Attachment {
    /** Logged as the bridge, as before these parts had classes of their own. */
    private static final Logger log = LoggerFactory.getLogger(Bridge.class);

    private final BridgeConfig config;
    private final LeaseKeeper leases;
    private final MemserverBringUp attacher;

    Reconnect(BridgeConfig config, LeaseKeeper leases, MemserverBringUp attacher) {
        this.config = config;
        this.leases = leases;
        this.attacher = attacher;
    }

    /** Logged by {@link MemserverBringUp#connect}; the health duty tries again. */
    @Override
    public void refused(MemserverLink l, RemoteMemoryException e) {}

    /** Fences {@code v} if another bridge had it there since this one (see LeaseKeeper). */
    @Override
    public void granted(MemserverLink l, Volume v, Lease lease, boolean ownersChanged) {
        leases.grantedOnReconnect(l, v, ownersChanged);
    }

    @Override
    public void leaseHeld(MemserverLink l, RemoteConnection c, Volume v, RemoteMemoryException r)
            throws LeaseWait {
        leases.refusedOnReconnect(l, v, r); // waits (throws LeaseWait) or fences
    }

    /**
     * One of the volume's replicas already, or the last replica of a lost slab (adopted again); otherwise stale
     * (released) or, if not older than what the slab is served at, kept unused for an operator to judge.
     */
    @Override
    public void regionFound(Volume v, Replica r) {
        MemserverLink l = r.link();
        RegionDescriptor d = r.region();
        if (v.roster().holds(r.serverId(), d.id()) || v.roster().adoptLost(r)) {
            return;
        }
        if (d.tag().slab() >= v.slabCount() && !config.allowShrink()) {
            log.warn("memserver {}: region {} holds slab {} of volume {}, past its configured size ({} bytes);"
                    + " kept but not used: restart with the size the volume was created with, or with"
                    + " --allow-shrink to discard it", l.label(), d.id(), d.tag().slab(), v.name(),
                    v.status().size());
            return;
        }
        long current = v.roster().currentGeneration(d.tag().slab());
        if (d.tag().generation() != 0 && d.tag().generation() >= current) {
            // Not older than what this bridge serves: it may be the newer copy of a slab this bridge
            // reattached without it. Never used, never freed: an operator decides (rbridge admin).
            log.warn("memserver {}: region {} of volume {} slab {} carries generation {} (this bridge "
                    + "serves generation {}); kept but not used; revoke it on the memserver if "
                    + "it is not needed", l.label(), d.id(), v.name(), d.tag().slab(),
                    d.tag().generation(), current);
        } else {
            log.info("memserver {}: releasing stale region {} of volume {} slab {} (generation {})",
                    l.label(), d.id(), v.name(), d.tag().slab(), d.tag().generation());
            r.connection().release(d);
        }
    }

    @Override
    public void manifestsFound(MemserverLink l, RemoteConnection c, Map<Volume, RegionDescriptor> copies,
            long wait) throws Exception {
        attacher.writeManifests(l, c, copies, wait);
    }
}
