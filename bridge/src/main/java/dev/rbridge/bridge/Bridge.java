package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.AllocationManifest;
import dev.rbridge.bridge.volume.Rebuilder;
import dev.rbridge.bridge.volume.Replica;
import dev.rbridge.bridge.volume.Slab;
import dev.rbridge.bridge.volume.SlabHost;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Providers;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.ServerInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;

/**
 * The bridge core: volumes over a set of memservers. It owns one connection per memserver, the ownership leases, slab
 * placement, reattach at start and the two background roles: the health duty cycle (reconnect, renew leases, notice
 * dead connections, refresh capacity, queue degraded slabs; every 250 ms on thread {@code bridge-health}) and the
 * rebuild ({@link Rebuilder}, thread {@code bridge-rebuild}). The NBD server is wired to its volumes from outside.
 *
 * <p>A lease is a connection's, so a reconnect takes it over from this bridge's own previous connection (the keys
 * rotate; the regions are opened again). Losing it to anyone else fences the volume ({@link Volume#fence}): a renewal
 * refused with {@code LEASE_HELD} or granted as a takeover (someone held it in between), a reconnect refused with
 * {@code LEASE_HELD} once the previous connection's lease has certainly lapsed, or, on a memserver where this process
 * never held it, refused for longer than a ttl (the holder may be this bridge's previous process until then: see
 * {@link #leaseHeld}), a key or a region refused as another client's ({@code ACCESS_DENIED}). The fenced volume fails
 * every request with EIO, is logged once, shows as {@code fenced}, and its leases elsewhere are given back so that its
 * new owner can have them.
 */
public final class Bridge implements SlabHost, AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Bridge.class);
    private static final long TICK_MILLIS = 250;
    private static final long RECONNECT_MILLIS = 1000;

    private final BridgeConfig config;
    private final RemoteMemoryProvider provider;
    private final List<MemserverLink> links = new ArrayList<>();
    private final Map<String, Volume> volumes = new LinkedHashMap<>();
    private final Rebuilder rebuilder;
    private final Map<MemserverLink, Long> nextAttempt = new java.util.concurrent.ConcurrentHashMap<>();
    private final Set<MemserverLink> connecting = java.util.concurrent.ConcurrentHashMap.newKeySet();
    private final Thread health;
    private final Map<MemserverLink, Map<Volume, RegionDescriptor>> startManifests = new HashMap<>();
    /** Volumes whose previous bridge did not give its lease back: their replicas may differ. */
    private final Set<Volume> unclean = new HashSet<>();
    /**
     * Per memserver and volume, when the lease last granted there lapses at the latest (System.nanoTime): until then a
     * LEASE_HELD after a reconnect may be this bridge's own previous connection, which the memserver has not yet seen
     * end (a cut network sends no FIN); after it, it is someone else.
     */
    private final Map<MemserverLink, Map<Volume, Long>> leasedUntil = new java.util.concurrent.ConcurrentHashMap<>();
    /**
     * Per memserver and volume, when it first refused this bridge the lease with LEASE_HELD since the lease was last
     * granted there (System.nanoTime); see {@link #leaseHeld}.
     */
    private final Map<MemserverLink, Map<Volume, Long>> refusedSince = new java.util.concurrent.ConcurrentHashMap<>();
    private volatile boolean running = true;

    private Bridge(BridgeConfig config) {
        this.config = config;
        this.provider = Providers.byName(config.transport());
        config.memservers().forEach(a -> links.add(new MemserverLink(a, config.metrics())));
        config.volumes().forEach(v -> volumes.put(v.name(), new Volume(v, this)));
        this.rebuilder = new Rebuilder(this, config.rebuildChunk());
        this.health = Thread.ofPlatform().name("bridge-health").daemon().unstarted(this::healthLoop);
    }

    /**
     * Connects to the memservers (waiting up to the configured start wait for all of them), takes the volumes'
     * leases, reattaches to the regions found and starts the background roles. Fails with a sentence an operator can
     * act on when no memserver answers or another bridge owns a volume.
     */
    public static Bridge start(BridgeConfig config) {
        Bridge b = new Bridge(config);
        try {
            b.attachAll();
        } catch (RuntimeException e) {
            b.close();
            throw e;
        }
        b.rebuilder.start();
        b.health.start();
        return b;
    }

    public BridgeConfig config() {
        return config;
    }

    public List<MemserverLink> memservers() {
        return List.copyOf(links);
    }

    public List<Volume> volumes() {
        return List.copyOf(volumes.values());
    }

    public Volume volume(String name) {
        return volumes.get(name);
    }

    public Rebuilder rebuilder() {
        return rebuilder;
    }

    // -------------------------------------------------------------------------------------------------- start

    private void attachAll() {
        long deadline = System.nanoTime() + config.startWait().toNanos();
        Map<String, Map<Integer, List<Replica>>> found = new HashMap<>();
        Set<MemserverLink> pending = new HashSet<>(links);
        long leaseEvery = config.leaseTtl().toNanos() / 3;
        long lastLease = System.nanoTime();
        while (true) {
            for (MemserverLink l : List.copyOf(pending)) {
                if (connect(l, found)) {
                    pending.remove(l);
                }
            }
            if (pending.isEmpty() || System.nanoTime() - deadline > 0) {
                break;
            }
            if (System.nanoTime() - lastLease > leaseEvery) {
                renewLeases(); // the ones already taken must not lapse while we wait for the others
                lastLease = System.nanoTime();
            }
            sleep(200);
        }
        if (pending.size() == links.size()) {
            StringBuilder why = new StringBuilder();
            for (MemserverLink l : links) {
                why.append(why.isEmpty() ? "" : "; ").append(l.label()).append(": ").append(l.lastError());
            }
            throw new IllegalStateException("no memserver is reachable (" + why + ")");
        }
        for (var e : startManifests.entrySet()) {
            MemserverLink l = e.getKey();
            RemoteConnection c = l.connection();
            try {
                writeManifests(l, c, e.getValue(), config.operationTimeout().toMillis() * 2);
            } catch (Exception ex) {
                linkDown(l, "could not write the allocation manifest: " + reason(ex));
            }
        }
        startManifests.clear();
        for (MemserverLink l : pending) {
            log.warn("memserver {} is not reachable ({}); serving without it, regions it may hold will be treated "
                    + "as stale when it comes back", l.label(), l.lastError());
        }
        for (Volume v : volumes.values()) {
            Map<Integer, List<Replica>> mine = found.getOrDefault(v.name(), Map.of());
            List<Replica> stale = v.reattach(mine);
            v.failClosedReplicas(); // a memserver that died while we were attaching
            stale.forEach(this::release);
            Volume.VolumeStatus st = v.status();
            log.info("volume {}: {} bytes, {} slab(s) of {} bytes, {} replica(s); reattached {} slab(s) ({} healthy, "
                            + "{} degraded), released {} stale region(s)", v.name(), st.size(), st.slabs(), st.slabSize(),
                    st.replicas(), st.allocated(), st.healthy(), st.degraded() + st.rebuilding(), stale.size());
            if (unclean.contains(v)) {
                List<Slab> replicated = v.replicated();
                if (!replicated.isEmpty()) {
                    log.warn("volume {}: the previous bridge did not shut down cleanly; writes it had in flight may have "
                            + "reached some replicas only, so {} slab(s) are resynchronized from one replica in the "
                            + "background (reads come from that replica meanwhile)", v.name(), replicated.size());
                    replicated.forEach(rebuilder::resync);
                }
            }
        }
    }

    /**
     * One attempt to bring a memserver up: connect, take every volume's lease, then either collect its regions
     * ({@code found} non-null: at start) or sort them into lost-and-found and stale (a memserver coming back later).
     */
    private boolean connect(MemserverLink l, Map<String, Map<Integer, List<Replica>>> found) {
        RemoteConnection c;
        try {
            c = provider.connect(new ConnectParams().address(l.address()).token(config.token())
                    .clientName("rbridge-bridge " + publicName(config.owner()))
                    .operationTimeout(config.operationTimeout())
                    .lanes(config.lanes()).tcpCongestion(config.tcpCongestion())
                    .connectTimeout(config.operationTimeout()));
        } catch (RemoteMemoryException e) {
            if (!e.getMessage().equals(l.lastError())) {
                log.warn("memserver {}: {}", l.label(), e.getMessage());
            }
            l.connectFailed(e.getMessage());
            if (e.status() == Status.AUTH_FAILED || e.status() == Status.VERSION_MISMATCH) {
                if (found != null) {
                    throw new IllegalStateException("memserver " + l.label() + " refused this bridge: " + e.getMessage());
                }
            }
            return false;
        }
        try {
            long wait = config.operationTimeout().toMillis() * 2;
            Set<Volume> leased = new HashSet<>();
            for (Volume v : volumes.values()) {
                if (v.fenced() != null) {
                    continue;
                }
                try {
                    dev.rbridge.rdma.Lease lease = c.lease(v.name(), config.owner(), config.leaseTtl())
                            .get(wait, TimeUnit.MILLISECONDS);
                    leaseGranted(l, v);
                    leased.add(v);
                    if (lease.tookOver() && found != null) {
                        unclean.add(v);
                    }
                } catch (ExecutionException e) {
                    if (cause(e) instanceof RemoteMemoryException r && r.status() == Status.LEASE_HELD) {
                        String msg = "volume '" + v.name() + "' is in use by another bridge (memserver " + l.label()
                                + ": " + r.getMessage() + "); stop that bridge, or wait for its lease to expire";
                        if (found != null) {
                            c.close();
                            throw new IllegalStateException(msg);
                        }
                        leaseHeld(l, v, r); // waits (throws LeaseWait) or fences
                        continue;
                    }
                    throw e;
                }
            }
            ServerInfo info = c.info().get(wait, TimeUnit.MILLISECONDS);
            List<RegionInfo> regions = c.list().get(wait, TimeUnit.MILLISECONDS);
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
                Replica r = new Replica(l, c, info.serverId(), opened);
                if (found != null) {
                    found.computeIfAbsent(v.name(), k -> new HashMap<>())
                            .computeIfAbsent((int) Math.min(Integer.MAX_VALUE, opened.tag().slab()), k -> new ArrayList<>())
                            .add(r);
                } else if (!v.holds(info.serverId(), d.id()) && !v.adoptLost(r)) {
                    long current = v.currentGeneration(d.tag().slab());
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
                        c.release(opened);
                    }
                }
            }
            if (found != null) {
                startManifests.put(l, manifests); // written once every memserver's copy has been merged
            } else {
                writeManifests(l, c, manifests, wait);
            }
            if (!running) {
                c.close();
                return false;
            }
            l.up(c, info.serverId(), info.capacityBytes(), info.freeBytes());
            log.info("memserver {} is up (instance {}, {} of {} bytes free, {} region(s) of ours)", l.label(),
                    info.serverId(), info.freeBytes(), info.capacityBytes(), regions.stream()
                            .filter(ri -> volumes.containsKey(ri.descriptor().tag().volume())).count());
            return true;
        } catch (Exception e) {
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
                    + " ms" : reason(e);
            log.warn("memserver {}: could not attach: {}", l.label(), why);
            l.connectFailed(why);
            c.close();
            return false;
        }
    }

    /** Makes sure {@code l} holds a manifest copy for every volume, with the whole bitmap in it. */
    private void writeManifests(MemserverLink l, RemoteConnection c, Map<Volume, RegionDescriptor> existing, long wait)
            throws Exception {
        for (Volume v : volumes.values()) {
            if (v.fenced() != null) {
                continue;
            }
            RegionDescriptor d = existing.get(v);
            if (d == null) {
                d = c.allocate(AllocationManifest.tag(v.name()), v.manifest().regionLength())
                        .get(wait, TimeUnit.MILLISECONDS);
            }
            v.manifest().adopt(l, c, d).get(wait, TimeUnit.MILLISECONDS);
        }
    }

    // --------------------------------------------------------------------------------------------- health duty

    private void healthLoop() {
        long leaseEvery = Math.max(TICK_MILLIS, config.leaseTtl().toMillis() / 3);
        long lastLease = 0; // renew at once: attaching may have taken a good part of the lease
        long lastInfo = 0;
        while (running) {
            long now = System.currentTimeMillis();
            try {
                for (MemserverLink l : links) {
                    RemoteConnection c = l.connection();
                    if (l.state() == MemserverLink.State.UP && c == null) {
                        linkDown(l, "connection lost");
                    }
                    if (l.state() != MemserverLink.State.UP && now >= nextAttempt.getOrDefault(l, 0L)
                            && connecting.add(l)) {
                        // On its own thread: a memserver that accepts but never answers must not stall this loop.
                        Thread.ofVirtual().name("bridge-connect-" + l.label()).start(() -> {
                            try {
                                connect(l, null);
                            } finally {
                                nextAttempt.put(l, System.currentTimeMillis() + RECONNECT_MILLIS);
                                connecting.remove(l);
                            }
                        });
                    }
                }
                if (now - lastLease >= leaseEvery) {
                    lastLease = now;
                    renewLeases();
                }
                if (now - lastInfo >= 1000) {
                    lastInfo = now;
                    refreshCapacity();
                    for (Volume v : volumes.values()) {
                        v.failClosedReplicas();
                        v.degraded().forEach(rebuilder::offer);
                    }
                }
            } catch (RuntimeException e) {
                log.error("health check failed", e);
            }
            sleep(TICK_MILLIS);
        }
    }

    private void renewLeases() {
        for (MemserverLink l : links) {
            RemoteConnection c = l.connection();
            if (c == null) {
                continue;
            }
            for (Volume v : volumes.values()) {
                if (v.fenced() != null) {
                    continue;
                }
                c.lease(v.name(), config.owner(), config.leaseTtl()).whenComplete((lease, e) -> {
                    if (e == null) {
                        if (lease.tookOver()) {
                            // Only a grant that ended another connection's lease is a takeover: someone held the
                            // volume between this bridge's renewals, and the keys this bridge uses are gone.
                            fence(v, "memserver " + l.label() + " granted this bridge's lease renewal as a takeover: "
                                    + "another client held the volume there since the previous renewal");
                        } else {
                            leaseGranted(l, v);
                        }
                        return;
                    }
                    Throwable t = cause(e);
                    if (t instanceof RemoteMemoryException r && r.status() == Status.LEASE_HELD) {
                        fence(v, "memserver " + l.label() + " refused this bridge's lease renewal (" + r.getMessage()
                                + "): another client took the volume over after this bridge's lease lapsed");
                        return;
                    }
                    if (l.connection() == c) {
                        linkDown(l, "lease renewal failed: " + reason(t));
                    }
                });
            }
        }
    }

    /** A lease was granted: the memserver lets it lapse at most its ttl after answering, which is before now. */
    private void leaseGranted(MemserverLink l, Volume v) {
        leasedUntil.computeIfAbsent(l, k -> new java.util.concurrent.ConcurrentHashMap<>())
                .put(v, System.nanoTime() + config.leaseTtl().toNanos() + LEASE_CLOCK_SLACK_NANOS);
        Map<Volume, Long> refused = refusedSince.get(l);
        if (refused != null) {
            refused.remove(v);
        }
    }

    /** The link to a memserver stays down, and is tried again, until a lease it was refused may be granted. */
    private static final class LeaseWait extends Exception {
        LeaseWait(String message) {
            super(message, null, false, false);
        }
    }

    /**
     * Memserver {@code l} refused volume {@code v}'s lease with {@code LEASE_HELD} as this bridge (re)connected: waits
     * (throws {@link LeaseWait}) while the lease may still be this bridge's own, fences {@code v} once it cannot be.
     * <ul>
     * <li>This process held the lease there: until that lease has certainly lapsed, the holder may be its own previous
     * connection, which the memserver has not seen end (a cut network sends no FIN); after, someone took it.</li>
     * <li>This process never held it there: the holder may be this bridge's previous process, restarted while the
     * memserver was cut off (the memserver keeps a connection it did not see end, and its lease, until the ttl runs
     * out). Fencing at once would stop the volume for good over a lease about to lapse; a lease refused for longer than
     * a ttl after the first refusal is no previous process's, as nothing renewed it since this one started.</li>
     * </ul>
     */
    private void leaseHeld(MemserverLink l, Volume v, RemoteMemoryException r) throws LeaseWait {
        long now = System.nanoTime();
        Long since = refusedSince.computeIfAbsent(l, k -> new java.util.concurrent.ConcurrentHashMap<>())
                .putIfAbsent(v, now);
        boolean first = since == null;
        long refusedFor = first ? 0 : now - since;
        Long until = leasedUntil.getOrDefault(l, Map.of()).get(v);
        if (until != null) {
            if (now - until < 0) {
                if (first) {
                    log.info("memserver {}: volume {} is still leased to a connection it has not seen end ({}); this "
                            + "bridge's previous connection, most likely; trying again", l.label(), v.name(),
                            r.getMessage());
                }
                throw new LeaseWait("volume " + v.name() + " is still leased to this bridge's previous connection, "
                        + "most likely (" + r.getMessage() + "); trying again");
            }
            fence(v, "memserver " + l.label() + " refused this bridge's lease when it reconnected (" + r.getMessage()
                    + ") after its own lease there had lapsed: another client holds the volume");
            return;
        }
        long window = config.leaseTtl().toNanos() + LEASE_CLOCK_SLACK_NANOS;
        if (refusedFor < window) {
            if (first) {
                log.info("memserver {}: volume {} is leased there to another connection ({}). This bridge never "
                        + "held it there since it started: it may be this bridge's previous process's lease, which a "
                        + "memserver keeps until its ttl runs out when it did not see that process go. Trying again "
                        + "for up to {} ms before concluding that another bridge owns the volume", l.label(), v.name(),
                        r.getMessage(), TimeUnit.NANOSECONDS.toMillis(window));
            }
            throw new LeaseWait("volume " + v.name() + " is leased to another connection (" + r.getMessage()
                    + "), maybe this bridge's previous process; trying again for "
                    + TimeUnit.NANOSECONDS.toMillis(window - refusedFor) + " ms more");
        }
        fence(v, "memserver " + l.label() + " has refused this bridge the volume's lease for "
                + TimeUnit.NANOSECONDS.toMillis(refusedFor) + " ms (" + r.getMessage() + "), longer than a lease of "
                + "this bridge's previous process could last: another client holds the volume");
    }

    /** Room for the memserver's clock running a little slower than this one over one ttl. */
    private static final long LEASE_CLOCK_SLACK_NANOS = TimeUnit.SECONDS.toNanos(1);

    /**
     * Stops serving {@code v} (see the class comment): logged once, as an error an operator must act on, and its
     * leases on every memserver are given back.
     */
    private void fence(Volume v, String why) {
        if (!v.fence(why)) {
            return;
        }
        log.error("volume {}: {}. This bridge stops serving it: every request on it fails with EIO from now on, "
                + "rather than writing on to the replicas it still reaches, and it gives its leases on it back. Find "
                + "out which bridge should serve volume {}, and restart this one once the other is gone.", v.name(),
                why, v.name());
        for (MemserverLink l : links) {
            RemoteConnection c = l.connection();
            if (c != null) {
                c.unlease(v.name(), config.owner()).whenComplete((x, e) -> {
                    if (e != null) {
                        log.debug("memserver {}: could not give back the lease on {}: {}", l.label(), v.name(),
                                reason(e));
                    }
                });
            }
        }
    }

    @Override
    public void leaseLost(Volume v, Replica r, String reason) {
        fence(v, "memserver " + r.link().label() + " refused this bridge's access to region " + r.region().id()
                + " (" + reason + "): another client took the volume's lease over there");
    }

    /**
     * This bridge's name in memservers' client lists: its owner string without the random part, which stays between
     * the bridge and the memservers (memservers that predate per-connection leases accepted it as proof of owning).
     */
    static String publicName(String owner) {
        int colon = owner.lastIndexOf(':');
        return colon > 0 && owner.length() - colon - 1 == 8 ? owner.substring(0, colon) : owner;
    }

    private void refreshCapacity() {
        for (MemserverLink l : links) {
            RemoteConnection c = l.connection();
            if (c != null) {
                c.info().thenAccept(i -> l.capacity(i.capacityBytes(), i.freeBytes()));
            }
        }
    }

    private synchronized void linkDown(MemserverLink l, String reason) {
        RemoteConnection dead = l.down(reason);
        if (dead == null) {
            return;
        }
        log.warn("memserver {} is down: {}; its replicas are taken out", l.label(), reason);
        dead.close();
        volumes.values().forEach(v -> v.manifest().forget(l));
        for (Volume v : volumes.values()) {
            v.connectionLost(dead, "memserver " + l.label() + " down: " + reason);
        }
    }

    // ------------------------------------------------------------------------------------------------ SlabHost

    @Override
    public CompletableFuture<List<Replica>> place(Slab slab, int count, long generation, Set<MemserverLink> exclude) {
        // Replica slot numbers are informational (shown by admin): new copies number on from the existing ones.
        return placeNext(slab, count, generation, new HashSet<>(exclude), new ArrayList<>(), null, exclude.size());
    }

    private CompletableFuture<List<Replica>> placeNext(Slab slab, int count, long generation, Set<MemserverLink> tried,
                                                       List<Replica> got, Throwable lastError, int firstSlot) {
        if (got.size() == count) {
            return CompletableFuture.completedFuture(got);
        }
        MemserverLink l = choose(tried, slab.length());
        if (l == null) {
            if (!got.isEmpty()) {
                return CompletableFuture.completedFuture(got);
            }
            boolean anyUp = links.stream().anyMatch(x -> x.connection() != null);
            if (!anyUp) {
                return CompletableFuture.failedFuture(new RemoteMemoryException(Status.CONNECTION_LOST,
                        "no memserver is reachable for volume " + slab.volume().name() + " slab " + slab.index()));
            }
            String why = "no reachable memserver has " + slab.length() + " bytes free for volume "
                    + slab.volume().name() + " slab " + slab.index()
                    + (lastError == null ? "" : " (last refusal: " + reason(lastError) + ")");
            return CompletableFuture.failedFuture(new RemoteMemoryException(Status.NO_CAPACITY, why));
        }
        tried.add(l);
        RemoteConnection c = l.connection();
        if (c == null) {
            return placeNext(slab, count, generation, tried, got, lastError, firstSlot);
        }
        long length = slab.length();
        l.reserved.addAndGet(length);
        int slot = firstSlot + got.size();
        return c.allocate(new dev.rbridge.rdma.RegionTag(slab.volume().name(), slab.index(), slot, generation), length)
                .handle((d, e) -> {
                    if (e == null) {
                        got.add(new Replica(l, c, l.serverId(), d));
                        return placeNext(slab, count, generation, tried, got, lastError, firstSlot);
                    }
                    l.reserved.addAndGet(-length);
                    log.debug("memserver {} refused a region for volume {} slab {}: {}", l.label(),
                            slab.volume().name(), slab.index(), reason(e));
                    if (cause(e) instanceof RemoteMemoryException r && r.status() == Status.ACCESS_DENIED) {
                        fence(slab.volume(), "memserver " + l.label() + " refused this bridge a region of the volume ("
                                + r.getMessage() + "): another client took the volume's lease over there");
                        got.forEach(this::release);
                        return CompletableFuture.<List<Replica>>failedFuture(r);
                    }
                    return placeNext(slab, count, generation, tried, got, cause(e), firstSlot);
                }).thenCompose(Function.identity());
    }

    /** Power of two choices on free capacity among the memservers that are up, not excluded and have room. */
    private MemserverLink choose(Set<MemserverLink> exclude, long length) {
        List<MemserverLink> candidates = new ArrayList<>();
        for (MemserverLink l : links) {
            if (!exclude.contains(l) && l.connection() != null && l.freeBytes() >= length) {
                candidates.add(l);
            }
        }
        if (candidates.isEmpty()) {
            return null;
        }
        if (candidates.size() == 1) {
            return candidates.getFirst();
        }
        ThreadLocalRandom rnd = ThreadLocalRandom.current();
        int a = rnd.nextInt(candidates.size());
        int b = rnd.nextInt(candidates.size() - 1);
        if (b >= a) {
            b++;
        }
        MemserverLink x = candidates.get(a);
        MemserverLink y = candidates.get(b);
        return x.freeBytes() >= y.freeBytes() ? x : y;
    }

    @Override
    public void rebuildWanted(Slab slab) {
        rebuilder.offer(slab);
    }

    @Override
    public void release(Replica r) {
        if (r.connection().isOpen()) {
            r.connection().release(r.region()).whenComplete((v, e) -> {
                if (e != null) {
                    log.debug("could not release {}: {}", r.describe(), reason(e));
                }
            });
        }
    }

    @Override
    public Duration operationTimeout() {
        return config.operationTimeout();
    }

    // -------------------------------------------------------------------------------------------------- close

    /** Stops the background roles, gives the leases back and closes the connections. Regions stay for a restart. */
    @Override
    public void close() {
        running = false;
        health.interrupt();
        rebuilder.close();
        for (MemserverLink l : links) {
            RemoteConnection c = l.connection();
            if (c != null) {
                for (Volume v : volumes.values()) {
                    if (v.fenced() != null) {
                        continue; // given back when it was fenced
                    }
                    try {
                        c.unlease(v.name(), config.owner()).get(1, TimeUnit.SECONDS);
                    } catch (ExecutionException | TimeoutException e) {
                        log.debug("memserver {}: could not give back the lease on {}: {}", l.label(), v.name(),
                                reason(e));
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
            }
            RemoteConnection old = l.down("bridge stopped");
            if (old != null) {
                old.close();
            }
        }
    }

    private static Throwable cause(Throwable e) {
        while ((e instanceof ExecutionException || e instanceof java.util.concurrent.CompletionException)
                && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }

    private static String reason(Throwable e) {
        Throwable t = cause(e);
        return t.getMessage() == null ? t.toString() : t.getMessage();
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
