package dev.rbridge.bridge;

import dev.rbridge.bridge.LeaseKeeper.LeaseWait;
import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.AllocationManifest;
import dev.rbridge.bridge.volume.Replica;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.common.Failures;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.ServerInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Brings one memserver up, the same way at start-up and when it comes back later, except where the two differ ({@link
 * Attachment}): connect, take every volume's lease there, open the volumes' regions and hand them on, see that it
 * holds an allocation manifest copy of every volume, mark it up.
 */
final class MemserverBringUp {
    /** Logged as the bridge, as before these parts had classes of their own. */
    private static final Logger log = LoggerFactory.getLogger(Bridge.class);

    private final RemoteMemoryProvider provider;
    private final BridgeConfig config;
    private final Map<String, Volume> volumes;
    private final LeaseKeeper leases;
    private final Membership membership;
    private final CapacityReporter capacity;

    MemserverBringUp(RemoteMemoryProvider provider, BridgeConfig config, Map<String, Volume> volumes,
            LeaseKeeper leases,
            Membership membership, CapacityReporter capacity) {
        this.provider = provider;
        this.config = config;
        this.volumes = volumes;
        this.leases = leases;
        this.membership = membership;
        this.capacity = capacity;
    }

    /**
     * One attempt to bring a memserver up: connect, take every volume's lease, open the volume's regions and hand
     * them to {@code attachment}, mark the memserver up. False if it is to be tried again.
     */
    boolean connect(MemserverLink l, Attachment attachment) {
        RemoteConnection c = open(l, attachment);
        if (c == null) {
            return false;
        }
        try {
            long wait = config.operationTimeout().toMillis() * 2;
            Set<Volume> leased = takeLeases(l, c, attachment, wait);
            ServerInfo info = c.info().get(wait, TimeUnit.MILLISECONDS);
            List<RegionInfo> regions = c.list().get(wait, TimeUnit.MILLISECONDS);
            Map<Volume, RegionDescriptor> manifests = openRegions(l, c, info, regions, leased, attachment, wait);
            attachment.manifestsFound(l, c, manifests, wait);
            synchronized (membership) { // against removeMemserver: a removed memserver is never brought up
                if (!membership.running() || l.removed()) {
                    c.close(); // its leases and manifest copy end with the connection
                    return false;
                }
                l.up(c, info.serverId(), info.capacityBytes(), info.freeBytes());
            }
            log.info("memserver {} is up (instance {}, {} of {} bytes free, {} region(s) of ours)", l.label(),
                    info.serverId(), info.freeBytes(), info.capacityBytes(), regions.stream()
                            .filter(ri -> volumes.containsKey(ri.descriptor().tag().volume())).count());
            capacity.recheck(); // at start-up the check comes once everything is attached
            return true;
        } catch (Exception e) {
            return attachFailed(l, c, e);
        }
    }

    /** Connects to {@code l}; null when it cannot be reached or refuses this bridge (said to {@code attachment}). */
    private RemoteConnection open(MemserverLink l, Attachment attachment) {
        try {
            return provider.connect(new ConnectParams().address(l.address()).token(config.token())
                    .tls(config.memserverTls())
                    .clientName("rbridge-bridge " + Bridge.publicName(config.owner()))
                    .operationTimeout(config.operationTimeout())
                    .lanes(config.lanes()).tcpCongestion(config.tcpCongestion())
                    .connectTimeout(config.operationTimeout()));
        } catch (RemoteMemoryException e) {
            if (!e.getMessage().equals(l.lastError())) {
                log.warn("memserver {}: {}", l.label(), e.getMessage());
            }
            l.connectFailed(e.getMessage());
            if (e.status() == Status.AUTH_FAILED || e.status() == Status.VERSION_MISMATCH) {
                attachment.refused(l, e);
            }
            return null;
        }
    }

    /** Takes the lease of every volume still served on {@code c}; returns the volumes whose lease it holds. */
    private Set<Volume> takeLeases(MemserverLink l, RemoteConnection c, Attachment attachment, long wait)
            throws Exception {
        Set<Volume> leased = new HashSet<>();
        for (Volume v : volumes.values()) {
            if (v.fenced() != null) {
                continue;
            }
            try {
                Lease lease = c.lease(v.name(), config.owner(), config.leaseTtl(), leases.leaseId(l, c, v))
                        .get(wait, TimeUnit.MILLISECONDS);
                boolean ownersChanged = leases.granted(l, c, v, lease);
                leased.add(v);
                attachment.granted(l, v, lease, ownersChanged);
            } catch (ExecutionException e) {
                if (Failures.cause(e) instanceof RemoteMemoryException r && r.status() == Status.LEASE_HELD) {
                    attachment.leaseHeld(l, c, v, r);
                    continue;
                }
                throw e;
            }
        }
        return leased;
    }

    /**
     * Opens the regions of the {@code leased} volumes listed on {@code c}: slab regions go to {@code attachment},
     * manifest copies are merged into their volume's manifest and returned (one per volume; a second is released).
     */
    private Map<Volume, RegionDescriptor> openRegions(MemserverLink l, RemoteConnection c, ServerInfo info,
            List<RegionInfo> regions, Set<Volume> leased,
            Attachment attachment, long wait) throws Exception {
        Map<Volume, RegionDescriptor> manifests = new HashMap<>();
        for (RegionInfo ri : regions) {
            RegionDescriptor d = ri.descriptor();
            Volume v = volumes.get(d.tag().volume());
            if (v == null || !leased.contains(v) || v.fenced() != null) {
                continue; // not ours, or not ours any more
            }
            RegionDescriptor opened = c.open(d.id()).get(wait, TimeUnit.MILLISECONDS);
            if (AllocationManifest.isManifest(d.tag())) {
                if (manifests.putIfAbsent(v, opened) != null) {
                    c.release(opened); // a second copy on one memserver: keep one
                } else {
                    v.manifest().merge(c, opened); // a late memserver may know of slabs the others forgot
                }
                continue;
            }
            attachment.regionFound(v, new Replica(l, c, info.serverId(), opened));
        }
        return manifests;
    }

    /**
     * An attempt that failed after connecting: a refusal that fails the start is thrown on, a lease being waited out
     * keeps the link down quietly, anything else is logged. False: to be tried again.
     */
    private boolean attachFailed(MemserverLink l, RemoteConnection c, Exception e) {
        if (e instanceof InterruptedException) {
            Thread.currentThread().interrupt();
        }
        if (e instanceof IllegalStateException ise) {
            throw ise;
        }
        if (e instanceof LeaseWait w) { // logged when the wait began; the link stays down until it ends
            l.connectFailed(w.getMessage());
            c.close();
            return false;
        }
        String why = e instanceof TimeoutException ? "no answer within " + config.operationTimeout().toMillis() * 2
                + " ms" : Failures.reason(e);
        log.warn("memserver {}: could not attach: {}", l.label(), why);
        l.connectFailed(why);
        c.close();
        return false;
    }

    /** Makes sure {@code l} holds a manifest copy for every volume, with the whole bitmap in it. */
    void writeManifests(MemserverLink l, RemoteConnection c, Map<Volume, RegionDescriptor> existing, long wait)
            throws Exception {
        for (Volume v : volumes.values()) {
            if (v.fenced() != null) {
                continue;
            }
            RegionDescriptor d = existing.get(v);
            RegionDescriptor smaller = null;
            if (d != null && d.length() < v.manifest().regionLength()) {
                smaller = d; // the volume grew past what it holds: a larger copy replaces it (already merged)
                d = null;
            }
            if (d == null) {
                d = c.allocate(AllocationManifest.tag(v.name()), v.manifest().regionLength())
                        .get(wait, TimeUnit.MILLISECONDS);
            }
            v.manifest().adopt(l, c, d).get(wait, TimeUnit.MILLISECONDS);
            if (smaller != null) {
                c.release(smaller).get(wait, TimeUnit.MILLISECONDS);
            }
        }
    }
}
