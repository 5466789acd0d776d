package dev.rbridge.bridge;

import dev.rbridge.bridge.LeaseKeeper.LeaseWait;
import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.AllocationManifest;
import dev.rbridge.bridge.volume.ReadHedger;
import dev.rbridge.bridge.volume.Rebuilder;
import dev.rbridge.bridge.volume.Replica;
import dev.rbridge.bridge.volume.Slab;
import dev.rbridge.bridge.volume.SlabHost;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.common.splice.Pipe;
import dev.rbridge.common.Failures;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.Providers;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.ServerInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

/**
 * The bridge core: volumes over a set of memservers. It owns one connection per memserver, slab placement, reattach at
 * start, the ownership leases and three background roles: the leases ({@link LeaseKeeper}, thread
 * {@code bridge-lease}: renews each lease from the moment it is taken, fences a volume whose lease went elsewhere), the
 * health duty cycle (reconnect, notice dead connections, refresh capacity, queue degraded slabs; every 250 ms on
 * thread {@code bridge-health}) and the rebuild ({@link Rebuilder}, thread {@code bridge-rebuild}). The NBD server is
 * wired to its volumes from outside.
 *
 * <p>A memserver is brought up by {@link #connect} the same way at start and when it comes back later, except where
 * the two differ ({@link Attachment}): at {@linkplain StartUp start-up} the regions of every memserver are collected
 * and adopted together, and another owner fails the start; on a {@linkplain Reconnect reconnect} each region is
 * judged against what the volumes serve now, and a lease held elsewhere is waited out or fences the volume.
 */
public final class Bridge implements SlabHost, AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Bridge.class);
    private static final long TICK_MILLIS = 250;
    private static final long RECONNECT_MILLIS = 1000;

    private final BridgeConfig config;
    private final AtomicLong drainChecks = new AtomicLong();
    private final RemoteMemoryProvider provider;
    /** Every memserver this bridge uses; grows and shrinks while it serves (admin, DNS), so copy-on-write. */
    private final List<MemserverLink> links = new java.util.concurrent.CopyOnWriteArrayList<>();
    /** The links that came from a DNS name, and which: only those go when the name stops listing them. */
    private final Map<MemserverLink, String> fromDns = new ConcurrentHashMap<>();
    /** Told of every memserver added and removed while serving (metrics register and drop its series). */
    private volatile java.util.function.Consumer<MemserverLink> memserverAdded = l -> { };
    private volatile java.util.function.Consumer<MemserverLink> memserverRemoved = l -> { };
    private final Map<String, Volume> volumes = new LinkedHashMap<>();
    private final Rebuilder rebuilder;
    private final LeaseKeeper leases;
    private final Reconnect reconnect = new Reconnect();
    private final Map<MemserverLink, Long> nextAttempt = new ConcurrentHashMap<>();
    private final Set<MemserverLink> connecting = ConcurrentHashMap.newKeySet();
    /** Memservers that said they are draining, for the health duty (the answer arrives on a provider's thread). */
    private final Set<MemserverLink> saidDraining = ConcurrentHashMap.newKeySet();
    /** The last failure to ask a memserver's STATE, per memserver, already said in the log. */
    private final Map<MemserverLink, String> stateFailureSaid = new ConcurrentHashMap<>();
    /** Memservers whose drain could not be followed, already said in the log. */
    private final Set<MemserverLink> drainRefusedSaid = ConcurrentHashMap.newKeySet();
    private final Thread health;
    /** Hedges small reads of replicated slabs; null when off or when no volume has two replicas. */
    private final ReadHedger hedger;
    /** Large reads are spliced (see SlabHost#splicesReads). */
    private final boolean splicesReads;
    private volatile boolean running = true;

    private Bridge(BridgeConfig config) {
        this.config = config;
        this.provider = Providers.byName(config.transport());
        config.memservers().forEach(a -> links.add(new MemserverLink(a, config.metrics()::memserver)));
        discover(); // the addresses of --memserver-dns names, before the first connect
        config.volumes().forEach(v -> volumes.put(v.name(), new Volume(v, this)));
        this.rebuilder = new Rebuilder(this, config.rebuildChunk());
        this.leases = new LeaseKeeper(config, volumes.values(), this::linkDown);
        this.health = Thread.ofPlatform().name("bridge-health").daemon().unstarted(this::healthLoop);
        this.hedger = config.hedgeReads() && config.volumes().stream().anyMatch(v -> v.replicas() > 1)
                ? new ReadHedger() : null;
        this.splicesReads = config.spliceReads() && "tcp".equals(provider.name()) && config.memserverTls() == null
                && Pipe.unavailable() == null;
        if (config.spliceReads() && "tcp".equals(provider.name()) && Pipe.unavailable() != null) {
            log.warn("large reads are copied, not spliced: {}", Pipe.unavailable());
        }
    }

    /**
     * Connects to the memservers (waiting up to the configured start wait for all of them), takes the volumes'
     * leases, reattaches to the regions found and starts the background roles. Fails with a sentence an operator can
     * act on when no memserver answers or another bridge owns a volume.
     */
    public static Bridge start(BridgeConfig config) {
        Bridge b = new Bridge(config);
        try {
            b.leases.start(); // renews each lease from the moment the start takes it
            b.new StartUp().run();
        } catch (RuntimeException e) {
            b.close();
            throw e;
        }
        b.rebuilder.start();
        b.health.start();
        b.checkCommitment(true);
        return b;
    }

    /**
     * What the volumes need if every byte is written ({@code provisionedBytes}: sizes times replicas, summed) against
     * what the memservers up now lend ({@code liveCapacityBytes}: their capacities, summed).
     */
    public record Commitment(long provisionedBytes, long liveCapacityBytes, int memserversUp) {
        /** More is promised than the memservers up can hold: writes to new slabs fail ENOSPC once they are full. */
        public boolean overcommitted() {
            return provisionedBytes > liveCapacityBytes;
        }
    }

    public Commitment commitment() {
        long provisioned = 0;
        for (Volume v : volumes.values()) {
            provisioned += v.spec().size() * v.spec().replicas();
        }
        long live = 0;
        int up = 0;
        for (MemserverLink l : links) {
            if (l.connection() != null) {
                live += l.capacityBytes();
                up++;
            }
        }
        return new Commitment(provisioned, live, up);
    }

    /** Whether the last check found the volumes over-committed; null before the first. */
    private volatile Boolean overcommitted;

    /**
     * Logs the commitment at start ({@code always}) and whenever it crosses the line as memservers come and go: WARN
     * when over-committed, INFO otherwise.
     */
    private void checkCommitment(boolean always) {
        Commitment c = commitment();
        Boolean before = overcommitted;
        overcommitted = c.overcommitted();
        if (!always && before != null && before == c.overcommitted()) {
            return;
        }
        if (c.overcommitted()) {
            log.warn("over-committed: the volumes need {} bytes when full (size x replicas) but the {} memserver(s)"
                            + " up lend {}; writes to slabs not yet allocated will fail ENOSPC once they are full:"
                            + " add memservers or capacity, or fewer or smaller volumes", c.provisionedBytes(),
                    c.memserversUp(), c.liveCapacityBytes());
        } else {
            log.info("capacity: the volumes need {} bytes when full (size x replicas); the {} memserver(s) up lend {}",
                    c.provisionedBytes(), c.memserversUp(), c.liveCapacityBytes());
        }
    }

    /**
     * Memory for the NBD server's payload buffers, registered with this bridge's transport (see {@link
     * RegisteredPayloadMemory}): the buffers reads land in and writes go out from.
     */
    public RegisteredPayloadMemory payloadMemory() {
        return new RegisteredPayloadMemory(provider);
    }

    public BridgeConfig config() {
        return config;
    }

    public List<MemserverLink> memservers() {
        return List.copyOf(links);
    }

    /** {@code added} and {@code removed} hear of every memserver added and removed from now on. */
    public void onMembership(java.util.function.Consumer<MemserverLink> added,
                             java.util.function.Consumer<MemserverLink> removed) {
        this.memserverAdded = java.util.Objects.requireNonNull(added);
        this.memserverRemoved = java.util.Objects.requireNonNull(removed);
    }

    /**
     * Adds a memserver while serving: the health duty connects to it at once, takes the volumes' leases there, and
     * it takes new slabs and rebuilds from then on (placement prefers free capacity). Adding one already used is no
     * change. Returns its link.
     */
    public synchronized MemserverLink addMemserver(InetSocketAddress address, String why) {
        String label = address.getHostString() + ":" + address.getPort();
        for (MemserverLink l : links) {
            if (l.label().equals(label) || l.address().equals(address)) {
                return l;
            }
        }
        MemserverLink l = new MemserverLink(address, config.metrics()::memserver);
        links.add(l);
        log.info("memserver {} added ({}): connecting; new slabs and rebuilds may go there", l.label(), why);
        memserverAdded.accept(l);
        return l;
    }

    /**
     * Stops using a memserver: allowed while it holds no live replica of any volume (it is down, or nothing was
     * placed there, or everything was moved off); its leases are given back and its regions stay. Returns null when
     * it was removed, else why not.
     */
    public synchronized String removeMemserver(String label, String why) {
        MemserverLink l = linkNamed(label);
        if (l == null) {
            return "no memserver " + label + " (see admin memservers)";
        }
        long live = replicasOn(l);
        if (live > 0) {
            return "memserver " + label + " holds " + live + " live replica(s): drain it first, or stop it";
        }
        long lost = lostCopiesOn(l);
        if (lost > 0) {
            return "memserver " + label + " may hold the last copy of " + lost + " lost slab(s): bring it back"
                    + " so they are adopted again, or stop it knowing their data is gone";
        }
        l.remove();
        links.remove(l);
        nextAttempt.remove(l);
        fromDns.remove(l);
        release(l, "removed: " + why);
        log.info("memserver {} removed ({})", label, why);
        memserverRemoved.accept(l);
        if (overcommitted != null) {
            checkCommitment(false);
        }
        return null;
    }

    /**
     * Stops using {@code l}'s connection without taking replicas out (it holds none live): its leases given back, the
     * connection closed, its manifest copies forgotten. Removal and letting a drained memserver go share this.
     */
    private void release(MemserverLink l, String reason) {
        RemoteConnection c = l.connection();
        if (c != null) {
            leases.giveBack(l, c);
        }
        RemoteConnection old = l.down(reason);
        if (old != null) {
            old.close();
        }
        volumes.values().forEach(v -> v.manifest().forget(l));
    }

    /** Slabs of which {@code l} may hold the last copy (lost slabs): a memserver holding one must not be let go. */
    private long lostCopiesOn(MemserverLink l) {
        return volumes.values().stream().mapToLong(v -> v.lostCopiesOn(l)).sum();
    }

    /**
     * Grows a volume while serving ({@link Volume#grow}): new NBD connections see the new size. Returns null when
     * grown, else why not. The configuration must say the new size too: a bridge started with the old one refuses
     * to discard the new slabs (unless --allow-shrink).
     */
    public synchronized GrowRefusal growVolume(String name, long size, boolean configSaysIt) {
        Volume v = volumes.get(name);
        if (v == null) {
            return new GrowRefusal(GrowRefusal.Kind.NO_VOLUME, "no volume " + name + " (see admin volumes)");
        }
        if (v.fenced() != null) {
            return new GrowRefusal(GrowRefusal.Kind.CONFLICT, "volume " + name + " is no longer served by this bridge: "
                    + v.fenced());
        }
        long before = v.size();
        try {
            v.grow(size);
        } catch (IllegalArgumentException e) {
            return new GrowRefusal(GrowRefusal.Kind.SIZE_OUT_OF_RANGE, e.getMessage());
        } catch (IllegalStateException e) {
            return new GrowRefusal(GrowRefusal.Kind.CONFLICT, e.getMessage());
        }
        log.info("volume {}: grown from {} to {} bytes ({} slabs); NBD connections made from now on see the new size{}",
                name, before, size, v.slabCount(), configSaysIt ? "" : "; put size=" + size
                        + " in the configuration too, or the next start refuses to drop the new slabs");
        checkCommitment(true); // the provisioned bytes changed: say where they stand now
        return null;
    }

    /**
     * Why {@link #growVolume} did not grow a volume: {@code kind} for the caller to act on (the admin's 404, 400 or
     * 409), {@code why} the sentence for the operator.
     */
    public record GrowRefusal(Kind kind, String why) {
        public enum Kind {
            /** No volume of that name. */
            NO_VOLUME,
            /** The size is none this volume can grow to while serving: too many slabs, not a multiple of its block. */
            SIZE_OUT_OF_RANGE,
            /** The volume cannot grow now: fenced, the size not larger, its end inside a slab. */
            CONFLICT
        }
    }

    /** The link labelled {@code label} (HOST:PORT as admin shows it), or null. */
    private MemserverLink linkNamed(String label) {
        return links.stream().filter(x -> x.label().equals(label)).findFirst().orElse(null);
    }

    /**
     * Empties a memserver while serving: it takes no new slabs or rebuilds, and every replica it holds is copied to
     * another memserver (the rebuild duty, one slab at a time, I/O going on) and then retired there. Once it holds
     * nothing live the bridge stops using it (removed, leases given back), so a draining memserver can exit. Returns
     * null when started, else why not.
     */
    public synchronized String drainMemserver(String label) {
        MemserverLink l = linkNamed(label);
        if (l == null) {
            return "no memserver " + label + " (see admin memservers)";
        }
        String refusal = l.draining() ? null : drainRefusal(l);
        if (refusal != null) {
            return refusal + ": add a memserver first";
        }
        l.drain();
        log.info("memserver {}: draining; {} slab replica(s) to move elsewhere", label, replicasOn(l));
        return null; // the health duty offers them to the rebuild duty within a second (finishDrains)
    }

    /** Why emptying {@code l} would leave too few memservers for some volume's replicas, or null. */
    private String drainRefusal(MemserverLink l) {
        long others = links.stream().filter(x -> x != l && !x.draining() && x.connection() != null).count();
        int most = volumes.values().stream().mapToInt(v -> v.spec().replicas()).max().orElse(1);
        return others < most ? "draining " + l.label() + " would leave " + others + " memserver(s) up for volumes of "
                + most + " replicas" : null;
    }

    private long replicasOn(MemserverLink l) {
        RemoteConnection c = l.connection();
        return c == null ? 0 : volumes.values().stream().mapToLong(v -> v.replicasOn(c)).sum();
    }

    /**
     * The memserver said it is draining (its operator's {@code drain}, a Kubernetes preStop): empty it as an admin
     * drain would, then let its connection go so that it can exit (it waits for its clients to leave). The link stays:
     * restarted, the memserver is used again. When the others cannot take its replicas, they stay (said once).
     */
    private synchronized void memserverDraining(MemserverLink l) {
        if (l.draining() || l.connection() == null || l.removed()) {
            return;
        }
        String refusal = drainRefusal(l);
        if (refusal != null) {
            if (drainRefusedSaid.add(l)) {
                log.warn("memserver {} is draining, but its {} slab replica(s) stay there: {}; add a memserver, or"
                        + " it exits only when its clients leave", l.label(), replicasOn(l), refusal);
            }
            return;
        }
        drainRefusedSaid.remove(l);
        l.drainAsked();
        log.info("memserver {} is draining: moving its {} slab replica(s) elsewhere, then letting it go", l.label(),
                replicasOn(l));
    }

    /**
     * Draining memservers: the slabs still on them are offered to the rebuild duty again (a copy that found no room,
     * or could not start, is retried), and one that is up and holds nothing live, and no last copy of a lost slab, is
     * let go. A draining memserver that is down is kept: it may hold the only copy of something.
     */
    /** How many times the health duty has looked for drains to finish: tests wait for a look, not for a time. */
    long drainChecks() {
        return drainChecks.get();
    }

    private void finishDrains() {
        for (MemserverLink l : links) {
            if (!l.draining()) {
                continue;
            }
            RemoteConnection c = l.connection();
            if (c == null) {
                continue;
            }
            long live = 0;
            for (Volume v : volumes.values()) {
                for (var s : v.slabsOn(c)) {
                    rebuilder.offer(s);
                    live++;
                }
            }
            if (live == 0 && l.drainedByMemserver()) {
                letGo(l);
            } else if (live == 0 && removeMemserver(l.label(), "drained: it holds nothing live") == null) {
                log.info("memserver {}: drained; it holds nothing live and this bridge no longer uses it", l.label());
            }
        }
    }

    /**
     * Ends the connection to a memserver that drained itself and holds nothing live of ours (nor the last copy of a
     * lost slab), so it can exit; the link stays and reconnects once the memserver admits clients again.
     */
    private synchronized void letGo(MemserverLink l) {
        long lost = lostCopiesOn(l);
        if (lost > 0) {
            if (drainRefusedSaid.add(l)) {
                log.warn("memserver {} is draining but may hold the last copy of {} lost slab(s): this bridge stays"
                        + " connected; stop it knowing their data is gone", l.label(), lost);
            }
            return;
        }
        release(l, "drained: the memserver is draining and holds nothing live of this bridge's");
        log.info("memserver {}: drained; this bridge let its connection go so it can exit, and uses it again once"
                + " it admits clients", l.label());
        if (overcommitted != null) {
            checkCommitment(false);
        }
    }

    /**
     * Resolves every --memserver-dns name: new addresses become memservers; addresses the name no longer lists go
     * when they hold nothing live (a pod replaced under a headless Service leaves its old address down). A name that
     * does not resolve now changes nothing.
     */
    private void discover() {
        for (InetSocketAddress name : config.memserverNames()) {
            java.util.Set<InetSocketAddress> now = new java.util.LinkedHashSet<>();
            try {
                for (java.net.InetAddress a : java.net.InetAddress.getAllByName(name.getHostString())) {
                    now.add(new InetSocketAddress(a, name.getPort()));
                }
            } catch (java.net.UnknownHostException e) {
                log.warn("memserver name {} does not resolve now ({}); its memservers stay as they are",
                        name.getHostString(), e.getMessage());
                continue;
            }
            String origin = "DNS name " + name.getHostString();
            for (InetSocketAddress a : now) {
                InetSocketAddress literal = new InetSocketAddress(a.getAddress().getHostAddress(), a.getPort());
                boolean known = links.stream().anyMatch(x -> x.address().equals(literal)
                        || x.label().equals(literal.getHostString() + ":" + literal.getPort()));
                MemserverLink l = addMemserver(literal, origin);
                if (!known) { // only what the name brought: a --memserver it also lists stays fixed
                    fromDns.putIfAbsent(l, name.getHostString());
                }
            }
            for (var e : fromDns.entrySet()) {
                MemserverLink l = e.getKey();
                if (e.getValue().equals(name.getHostString()) && !now.contains(l.address())
                        && l.connection() == null) {
                    removeMemserver(l.label(), origin + " no longer lists it");
                }
            }
        }
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

    // ------------------------------------------------------------------------------------------ bringing up

    /**
     * What bringing a memserver up does differently at start-up and on a later reconnect; {@link #connect} does the
     * steps they share (connect, take every volume's lease, open the volume's regions, mark the memserver up).
     */
    private sealed interface Attachment permits StartUp, Reconnect {
        /** The memserver refused this bridge's token or protocol version. */
        void refused(MemserverLink l, RemoteMemoryException e);

        /**
         * {@code v}'s lease was granted there ({@code ownersChanged}: another owner had it there since this process's
         * last grant or renewal there).
         */
        void granted(MemserverLink l, Volume v, Lease lease, boolean ownersChanged);

        /**
         * Another connection holds {@code v}'s lease there. Returns to go on without {@code v} on this memserver, or
         * throws: {@link LeaseWait} to try the memserver again later, IllegalStateException to fail the start.
         */
        void leaseHeld(MemserverLink l, RemoteConnection c, Volume v, RemoteMemoryException r) throws LeaseWait;

        /** A region of {@code v} (not a manifest copy) is there, opened as {@code r}. */
        void regionFound(Volume v, Replica r);

        /** The manifest copies the memserver holds, per volume (at most one each; the others were released). */
        void manifestsFound(MemserverLink l, RemoteConnection c, Map<Volume, RegionDescriptor> manifests, long wait)
                throws Exception;
    }

    /**
     * Start-up: every memserver is tried until the start wait runs out, and what they hold is adopted once all have
     * answered, so each slab takes its newest generation from wherever it is. Another bridge owning a volume, or a
     * memserver refusing this bridge, fails the start.
     */
    private final class StartUp implements Attachment {
        /** Per volume and slab index, every region found. */
        private final Map<String, Map<Integer, List<Replica>>> found = new HashMap<>();
        /** Per memserver, its manifest copies: written back once every memserver's copy has been merged. */
        private final Map<MemserverLink, Map<Volume, RegionDescriptor>> manifests = new HashMap<>();
        /** Volumes whose previous bridge did not give its lease back: their replicas may differ. */
        private final Set<Volume> unclean = new HashSet<>();

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
            long deadline = System.nanoTime() + config.startWait().toNanos();
            Set<MemserverLink> pending = new HashSet<>(links);
            while (true) {
                for (MemserverLink l : List.copyOf(pending)) {
                    if (connect(l, this)) {
                        pending.remove(l);
                    }
                }
                if (pending.isEmpty() || System.nanoTime() - deadline > 0) {
                    break;
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
            return pending;
        }

        /** Writes the merged manifests to every memserver reached. */
        private void writeManifests() {
            for (var e : manifests.entrySet()) {
                MemserverLink l = e.getKey();
                RemoteConnection c = l.connection();
                try {
                    Bridge.this.writeManifests(l, c, e.getValue(), config.operationTimeout().toMillis() * 2);
                } catch (Exception ex) {
                    linkDown(l, "could not write the allocation manifest: " + Failures.reason(ex));
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
                List<Replica> stale = v.reattach(mine);
                v.failClosedReplicas(); // a memserver that died while we were attaching
                stale.forEach(Bridge.this::release);
                Volume.VolumeStatus st = v.status();
                log.info("volume {}: {} bytes, {} slab(s) of {} bytes, {} replica(s); reattached {} slab(s) ({} "
                                + "healthy, {} degraded), released {} stale region(s)", v.name(), st.size(), st.slabs(),
                        st.slabSize(), st.replicas(), st.allocated(), st.healthy(), st.degraded() + st.rebuilding(),
                        stale.size());
                if (unclean.contains(v)) {
                    List<Slab> replicated = v.replicated();
                    if (!replicated.isEmpty()) {
                        log.warn("volume {}: the previous bridge did not shut down cleanly; writes it had in flight "
                                + "may have reached some replicas only, so {} slab(s) are resynchronized from one "
                                + "replica in the background (reads come from that replica meanwhile)", v.name(),
                                replicated.size());
                        replicated.forEach(rebuilder::resync);
                    }
                }
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
                    .collect(java.util.stream.Collectors.joining(", ")) + ")";
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
            for (int i = 0; i < sorted.size(); ) {
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

    /**
     * A memserver coming back while the bridge serves: each region is judged against what the volumes serve now, its
     * manifest copies are written at once, and a lease held by another connection is waited out or fences the volume
     * ({@link LeaseKeeper#refusedOnReconnect}).
     */
    private final class Reconnect implements Attachment {
        /** Logged by {@link #connect}; the health duty tries again. */
        @Override
        public void refused(MemserverLink l, RemoteMemoryException e) {
        }

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
            if (v.holds(r.serverId(), d.id()) || v.adoptLost(r)) {
                return;
            }
            if (d.tag().slab() >= v.slabCount() && !config.allowShrink()) {
                log.warn("memserver {}: region {} holds slab {} of volume {}, past its configured size ({} bytes);"
                                + " kept but not used: restart with the size the volume was created with, or with"
                                + " --allow-shrink to discard it", l.label(), d.id(), d.tag().slab(), v.name(),
                        v.status().size());
                return;
            }
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
                r.connection().release(d);
            }
        }

        @Override
        public void manifestsFound(MemserverLink l, RemoteConnection c, Map<Volume, RegionDescriptor> copies,
                                   long wait) throws Exception {
            writeManifests(l, c, copies, wait);
        }
    }

    /**
     * One attempt to bring a memserver up: connect, take every volume's lease, open the volume's regions and hand
     * them to {@code attachment}, mark the memserver up. False if it is to be tried again.
     */
    private boolean connect(MemserverLink l, Attachment attachment) {
        RemoteConnection c;
        try {
            c = provider.connect(new ConnectParams().address(l.address()).token(config.token()).tls(config.memserverTls())
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
                attachment.refused(l, e);
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
                attachment.regionFound(v, new Replica(l, c, info.serverId(), opened));
            }
            attachment.manifestsFound(l, c, manifests, wait);
            synchronized (this) { // against removeMemserver: a removed memserver is never brought up
                if (!running || l.removed()) {
                    c.close(); // its leases and manifest copy end with the connection
                    return false;
                }
                l.up(c, info.serverId(), info.capacityBytes(), info.freeBytes());
            }
            log.info("memserver {} is up (instance {}, {} of {} bytes free, {} region(s) of ours)", l.label(),
                    info.serverId(), info.freeBytes(), info.capacityBytes(), regions.stream()
                            .filter(ri -> volumes.containsKey(ri.descriptor().tag().volume())).count());
            if (overcommitted != null) { // at start-up the check comes once everything is attached
                checkCommitment(false);
            }
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
                    + " ms" : Failures.reason(e);
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

    // --------------------------------------------------------------------------------------------- health duty

    private void healthLoop() {
        long lastInfo = 0;
        long lastDns = System.currentTimeMillis(); // resolved in the constructor
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
                                connect(l, reconnect);
                            } finally {
                                nextAttempt.put(l, System.currentTimeMillis() + RECONNECT_MILLIS);
                                connecting.remove(l);
                            }
                        });
                    }
                }
                if (!config.memserverNames().isEmpty() && now - lastDns >= BridgeConfig.DNS_INTERVAL.toMillis()) {
                    lastDns = now;
                    discover();
                }
                if (now - lastInfo >= 1000) {
                    lastInfo = now;
                    for (MemserverLink l : saidDraining) {
                        saidDraining.remove(l);
                        memserverDraining(l);
                    }
                    finishDrains();
                    drainChecks.incrementAndGet();
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

    @Override
    public void leaseLost(Volume v, Replica r, String reason) {
        leases.fence(v, "memserver " + r.link().label() + " refused this bridge's access to region " + r.region().id()
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
                c.state().whenComplete((st, e) -> {
                    if (e != null) {
                        String why = Failures.reason(e);
                        if (!why.equals(stateFailureSaid.put(l, why))) {
                            log.warn("memserver {}: cannot ask whether it is draining ({}); a drain of its own would"
                                    + " not be followed", l.label(), why);
                        }
                    } else {
                        stateFailureSaid.remove(l);
                        if (st.draining()) {
                            saidDraining.add(l);
                        }
                    }
                });
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
        if (overcommitted != null) {
            checkCommitment(false);
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
                    + (lastError == null ? "" : " (last refusal: " + Failures.reason(lastError) + ")");
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
        return c.allocate(new RegionTag(slab.volume().name(), slab.index(), slot, generation), length)
                .handle((d, e) -> {
                    if (e == null) {
                        got.add(new Replica(l, c, l.serverId(), d));
                        return placeNext(slab, count, generation, tried, got, lastError, firstSlot);
                    }
                    l.reserved.addAndGet(-length);
                    log.debug("memserver {} refused a region for volume {} slab {}: {}", l.label(),
                            slab.volume().name(), slab.index(), Failures.reason(e));
                    if (Failures.cause(e) instanceof RemoteMemoryException r && r.status() == Status.ACCESS_DENIED) {
                        leases.fence(slab.volume(), "memserver " + l.label() + " refused this bridge a region of "
                                + "the volume (" + r.getMessage() + "): another client took the volume's lease over "
                                + "there");
                        got.forEach(this::release);
                        return CompletableFuture.<List<Replica>>failedFuture(r);
                    }
                    return placeNext(slab, count, generation, tried, got, Failures.cause(e), firstSlot);
                }).thenCompose(Function.identity());
    }

    /** Power of two choices on free capacity among the memservers that are up, not excluded and have room. */
    private MemserverLink choose(Set<MemserverLink> exclude, long length) {
        List<MemserverLink> candidates = new ArrayList<>();
        for (MemserverLink l : links) {
            if (!exclude.contains(l) && !l.draining() && l.connection() != null && l.freeBytes() >= length) {
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
                    log.debug("could not release {}: {}", r.describe(), Failures.reason(e));
                }
            });
        }
    }

    @Override
    public Duration operationTimeout() {
        return config.operationTimeout();
    }

    @Override
    public ReadHedger hedger() {
        return hedger;
    }

    @Override
    public boolean splicesReads() {
        return splicesReads;
    }

    // -------------------------------------------------------------------------------------------------- close

    /** Stops the background roles, gives the leases back and closes the connections. Regions stay for a restart. */
    @Override
    public void close() {
        running = false;
        leases.close();
        health.interrupt();
        rebuilder.close();
        if (hedger != null) {
            hedger.close();
        }
        for (MemserverLink l : links) {
            RemoteConnection c = l.connection();
            if (c != null) {
                leases.giveBack(l, c);
            }
            RemoteConnection old = l.down("bridge stopped");
            if (old != null) {
                old.close();
            }
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
