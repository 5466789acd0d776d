package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Rebuilder;
import dev.rbridge.bridge.volume.Replica;
import dev.rbridge.bridge.volume.Slab;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.common.Failures;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;
import java.util.stream.Collectors;

/**
 * Start-up: every memserver is tried until the start wait runs out, and what they hold is adopted once all have
 * answered, so each slab takes its newest generation from wherever it is. Another bridge owning a volume, or a
 * memserver refusing this bridge, fails the start.
 */
final class StartUp implements Attachment {
    /** Logged as the bridge, as before these parts had classes of their own. */
    private static final Logger log = LoggerFactory.getLogger(Bridge.class);

    private final BridgeConfig config;
    private final Membership membership;
    private final MemserverBringUp attacher;
    private final Map<String, Volume> volumes;
    /** Gives a stale region back. */
    private final Consumer<Replica> release;
    private final Rebuilder rebuilder;
    /** Per volume and slab index, every region found. */
    private final Map<String, Map<Integer, List<Replica>>> found = new HashMap<>();
    /** Per memserver, its manifest copies: written back once every memserver's copy has been merged. */
    private final Map<MemserverLink, Map<Volume, RegionDescriptor>> manifests = new HashMap<>();
    /** Volumes whose previous bridge did not give its lease back: their replicas may differ. */
    private final Set<Volume> unclean = new HashSet<>();

    StartUp(BridgeConfig config, Membership membership, MemserverBringUp attacher, Map<String, Volume> volumes,
            Consumer<Replica> release, Rebuilder rebuilder) {
        this.config = config;
        this.membership = membership;
        this.attacher = attacher;
        this.volumes = volumes;
        this.release = release;
        this.rebuilder = rebuilder;
    }

    void run() {
        Set<MemserverLink> unreachable = connectAll();
        writeManifests();
        for (MemserverLink l : unreachable) {
            log.warn("memserver {} is not reachable ({}); serving without it, regions it may hold will be treated "
                    + "as stale when it comes back", l.label(), l.lastError());
        }
        reattachVolumes();
    }

    /** Tries the memservers until all are up or the start wait is over; returns the ones still down. */
    private Set<MemserverLink> connectAll() {
        List<MemserverLink> links = membership.links();
        long deadline = System.nanoTime() + config.startWait().toNanos();
        Set<MemserverLink> pending = new HashSet<>(links);
        while (true) {
            for (MemserverLink l : List.copyOf(pending)) {
                if (attacher.connect(l, this)) {
                    pending.remove(l);
                }
            }
            if (pending.isEmpty() || System.nanoTime() - deadline > 0) {
                break;
            }
            Bridge.sleep(200);
        }
        if (pending.size() == links.size()) {
            StringBuilder why = new StringBuilder();
            for (MemserverLink l : links) {
                why.append(why.isEmpty() ? "" : "; ").append(l.label()).append(": ").append(l.lastError());
            }
            throw new IllegalStateException("no memserver is reachable (" + why + ")");
        }
        return pending;
    }

    /** Writes the merged manifests to every memserver reached. */
    private void writeManifests() {
        for (var e : manifests.entrySet()) {
            MemserverLink l = e.getKey();
            RemoteConnection c = l.connection();
            try {
                attacher.writeManifests(l, c, e.getValue(), config.operationTimeout().toMillis() * 2);
            } catch (Exception ex) {
                membership.linkDown(l, "could not write the allocation manifest: " + Failures.reason(ex));
            }
        }
        manifests.clear();
    }

    /** Hands each volume the regions found; stale ones are released, unclean volumes resynchronized. */
    private void reattachVolumes() {
        for (Volume v : volumes.values()) { // every volume checked before any region is released
            guardShrink(v, found.getOrDefault(v.name(), Map.of()));
        }
        for (Volume v : volumes.values()) {
            Map<Integer, List<Replica>> mine = found.getOrDefault(v.name(), Map.of());
            List<Replica> stale = v.roster().reattach(mine);
            v.roster().failClosedReplicas(); // a memserver that died while we were attaching
            stale.forEach(release);
            Volume.VolumeStatus st = v.status();
            log.info("volume {}: {} bytes, {} slab(s) of {} bytes, {} replica(s); reattached {} slab(s) ({} "
                    + "healthy, {} degraded), released {} stale region(s)", v.name(), st.size(), st.slabs(),
                    st.slabSize(), st.replicas(), st.allocated(), st.healthy(), st.degraded() + st.rebuilding(),
                    stale.size());
            if (unclean.contains(v)) {
                resync(v);
            }
        }
    }

    /** The previous bridge exited uncleanly: {@code v}'s replicated slabs are made equal again in the background. */
    private void resync(Volume v) {
        List<Slab> replicated = v.roster().replicated();
        if (!replicated.isEmpty()) {
            log.warn("volume {}: the previous bridge did not shut down cleanly; writes it had in flight "
                    + "may have reached some replicas only, so {} slab(s) are resynchronized from one "
                    + "replica in the background (reads come from that replica meanwhile)", v.name(),
                    replicated.size());
            replicated.forEach(rebuilder::resync);
        }
    }

    /**
     * Slabs past the configured end mean the volume was bigger: starting would release them. Refused unless
     * --allow-shrink, and then said slab by slab.
     */
    private void guardShrink(Volume v, Map<Integer, List<Replica>> mine) {
        List<Integer> past = mine.keySet().stream().filter(i -> i >= v.slabCount()).sorted().toList();
        if (past.isEmpty()) {
            return;
        }
        long bytes = past.stream().mapToLong(i -> mine.get(i).getFirst().region().length()).sum();
        String what = "slab" + (past.size() == 1 ? " " : "s ") + ranges(past) + " (" + bytes
                + " bytes of data, on " + mine.entrySet().stream().filter(e -> e.getKey() >= v.slabCount())
                        .flatMap(e -> e.getValue().stream()).map(r -> r.link().label()).distinct().sorted()
                        .collect(Collectors.joining(", "))
                + ")";
        if (!config.allowShrink()) {
            throw new IllegalStateException("volume '" + v.name() + "' is configured with " + v.status().size()
                    + " bytes but the memservers hold it bigger: starting would discard " + what + ". Start with"
                    + " the size it was created with, or add --allow-shrink to discard them");
        }
        log.warn("volume {}: shrinking to {} bytes (--allow-shrink) discards {}", v.name(), v.status().size(),
                what);
    }

    /** Sorted indices as runs: "12, 14-15". */
    private static String ranges(List<Integer> sorted) {
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < sorted.size();) {
            int j = i;
            while (j + 1 < sorted.size() && sorted.get(j + 1) == sorted.get(j) + 1) {
                j++;
            }
            out.append(out.isEmpty() ? "" : ", ").append(sorted.get(i))
                    .append(j > i ? "-" + sorted.get(j) : "");
            i = j + 1;
        }
        return out.toString();
    }

    @Override
    public void refused(MemserverLink l, RemoteMemoryException e) {
        throw new IllegalStateException("memserver " + l.label() + " refused this bridge: " + e.getMessage());
    }

    /** A takeover: nobody gave the lease back, the previous bridge exited uncleanly. */
    @Override
    public void granted(MemserverLink l, Volume v, Lease lease, boolean ownersChanged) {
        if (lease.tookOver()) {
            unclean.add(v);
        }
    }

    @Override
    public void leaseHeld(MemserverLink l, RemoteConnection c, Volume v, RemoteMemoryException r) {
        c.close();
        throw new IllegalStateException("volume '" + v.name() + "' is in use by another bridge (memserver "
                + l.label() + ": " + r.getMessage() + "); stop that bridge, or wait for its lease to expire");
    }

    @Override
    public void regionFound(Volume v, Replica r) {
        found.computeIfAbsent(v.name(), k -> new HashMap<>())
                .computeIfAbsent((int) Math.min(Integer.MAX_VALUE, r.region().tag().slab()), k -> new ArrayList<>())
                .add(r);
    }

    @Override
    public void manifestsFound(MemserverLink l, RemoteConnection c, Map<Volume, RegionDescriptor> copies,
            long wait) {
        manifests.put(l, copies); // written once every memserver's copy has been merged
    }
}
