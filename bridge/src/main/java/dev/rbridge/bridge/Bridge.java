package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.ReadHedger;
import dev.rbridge.bridge.volume.Rebuilder;
import dev.rbridge.bridge.volume.Replica;
import dev.rbridge.bridge.volume.Slab;
import dev.rbridge.bridge.volume.SlabHost;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.common.splice.Pipe;
import dev.rbridge.rdma.Providers;
import dev.rbridge.rdma.RemoteMemoryProvider;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Consumer;

/**
 * The bridge core: volumes over a set of memservers. It wires the parts that do the work and is what the rest of the
 * program holds: the memservers it uses ({@link Membership}, one connection each), bringing a memserver up ({@link
 * MemserverBringUp}: reattach at {@linkplain StartUp start-up}, judge its regions on a {@linkplain Reconnect reconnect}),
 * slab placement ({@link Placement}), drains ({@link MemserverDrains}), capacity accounting ({@link
 * CapacityReporter}), and three background roles: the leases ({@link LeaseKeeper}, thread {@code bridge-lease}: renews
 * each lease from the moment it is taken, fences a volume whose lease went elsewhere), the health duty cycle ({@link
 * HealthDuty}: reconnect, notice dead connections, refresh capacity, queue degraded slabs; every 250 ms on thread
 * {@code bridge-health}) and the rebuild ({@link Rebuilder}, thread {@code bridge-rebuild}). The NBD server is wired to
 * its volumes from outside.
 */
public final class Bridge implements SlabHost, AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Bridge.class);

    private final BridgeConfig config;
    private final RemoteMemoryProvider provider;
    private final Map<String, Volume> volumes = new LinkedHashMap<>();
    private final CapacityReporter capacity;
    private final LeaseKeeper leases;
    private final Membership membership;
    private final Rebuilder rebuilder;
    private final Placement placement;
    private final MemserverDrains drains;
    private final MemserverBringUp attacher;
    private final HealthDuty health;
    /** Hedges small reads of replicated slabs; null when off or when no volume has two replicas. */
    private final ReadHedger hedger;
    /** Large reads are spliced (see SlabHost#splicesReads). */
    private final boolean splicesReads;

    private Bridge(BridgeConfig config) {
        this.config = config;
        this.provider = Providers.byName(config.transport());
        List<MemserverLink> links = new CopyOnWriteArrayList<>();
        config.memservers().forEach(a -> links.add(new MemserverLink(a, config.metrics()::memserver)));
        this.capacity = new CapacityReporter(volumes.values(), links);
        this.leases = new LeaseKeeper(config, volumes.values(), this::linkDown);
        this.membership = new Membership(config, links, volumes, leases, capacity);
        membership.discover(); // the addresses of --memserver-dns names, before the first connect
        config.volumes().forEach(v -> volumes.put(v.name(), new Volume(v, this)));
        this.rebuilder = new Rebuilder(this, config.rebuildChunk(), config.rebuildRate());
        this.placement = new Placement(links, leases);
        this.drains = new MemserverDrains(membership, volumes.values(), rebuilder, capacity);
        this.attacher = new MemserverBringUp(provider, config, volumes, leases, membership, capacity);
        this.health = new HealthDuty(config, membership, attacher, new Reconnect(config, leases, attacher), drains,
                capacity, volumes.values(), rebuilder);
        this.hedger = config.hedgeReads() && config.volumes().stream().anyMatch(v -> v.replicas() > 1)
                ? new ReadHedger()
                : null;
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
            new StartUp(config, b.membership, b.attacher, b.volumes, b.placement::release, b.rebuilder).run();
        } catch (RuntimeException e) {
            b.close();
            throw e;
        }
        b.rebuilder.start();
        b.health.start();
        b.capacity.check(true);
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
        return capacity.commitment();
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
        return List.copyOf(membership.links());
    }

    /** {@code added} and {@code removed} hear of every memserver added and removed from now on. */
    public void onMembership(Consumer<MemserverLink> added, Consumer<MemserverLink> removed) {
        membership.onMembership(added, removed);
    }

    /**
     * Adds a memserver while serving: the health duty connects to it at once, takes the volumes' leases there, and
     * it takes new slabs and rebuilds from then on (placement prefers free capacity). Adding one already used is no
     * change. Returns its link.
     */
    public MemserverLink addMemserver(InetSocketAddress address, String why) {
        return membership.addMemserver(address, why);
    }

    /**
     * Stops using a memserver: allowed while it holds no live replica of any volume (it is down, or nothing was
     * placed there, or everything was moved off); its leases are given back and its regions stay. Returns null when
     * it was removed, else why not.
     */
    public String removeMemserver(String label, String why) {
        return membership.removeMemserver(label, why);
    }

    /**
     * Grows a volume while serving ({@link Volume#grow}): new NBD connections see the new size. Returns null when
     * grown, else why not. The configuration must say the new size too: a bridge started with the old one refuses
     * to discard the new slabs (unless --allow-shrink).
     */
    public GrowRefusal growVolume(String name, long size, boolean configSaysIt) {
        synchronized (membership) {
            Volume v = volumes.get(name);
            if (v == null) {
                return new GrowRefusal(GrowRefusal.Kind.NO_VOLUME, "no volume " + name + " (see admin volumes)");
            }
            if (v.fenced() != null) {
                return new GrowRefusal(GrowRefusal.Kind.CONFLICT, "volume " + name + " is no longer served by this"
                        + " bridge: " + v.fenced());
            }
            long before = v.size();
            try {
                v.grow(size);
            } catch (IllegalArgumentException e) {
                return new GrowRefusal(GrowRefusal.Kind.SIZE_OUT_OF_RANGE, e.getMessage());
            } catch (IllegalStateException e) {
                return new GrowRefusal(GrowRefusal.Kind.CONFLICT, e.getMessage());
            }
            log.info("volume {}: grown from {} to {} bytes ({} slabs); NBD connections made from now on see the new"
                    + " size{}", name, before, size, v.slabCount(),
                    configSaysIt ? ""
                            : "; put size=" + size
                                    + " in the configuration too, or the next start refuses to drop the new slabs");
            capacity.check(true); // the provisioned bytes changed: say where they stand now
            return null;
        }
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

    /**
     * Empties a memserver while serving: it takes no new slabs or rebuilds, and every replica it holds is copied to
     * another memserver (the rebuild duty, one slab at a time, I/O going on) and then retired there. Once it holds
     * nothing live the bridge stops using it (removed, leases given back), so a draining memserver can exit. Returns
     * null when started, else why not.
     */
    public String drainMemserver(String label) {
        return drains.drainMemserver(label);
    }

    /** How many times the health duty has looked for drains to finish: tests wait for a look, not for a time. */
    long drainChecks() {
        return drains.drainChecks();
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

    /** For the lease keeper: a memserver whose lease renewal failed is taken down. */
    private void linkDown(MemserverLink l, String reason) {
        membership.linkDown(l, reason);
    }

    /**
     * This bridge's name in memservers' client lists: its owner string without the random part, which stays between
     * the bridge and the memservers (memservers that predate per-connection leases accepted it as proof of owning).
     */
    static String publicName(String owner) {
        int colon = owner.lastIndexOf(':');
        return colon > 0 && owner.length() - colon - 1 == 8 ? owner.substring(0, colon) : owner;
    }

    /** The health duty, for tests that watch its work. */
    HealthDuty health() {
        return health;
    }

    // ------------------------------------------------------------------------------------------------ SlabHost

    @Override
    public CompletableFuture<List<Replica>> place(Slab slab, int count, long generation, Set<MemserverLink> exclude) {
        return placement.place(slab, count, generation, exclude);
    }

    @Override
    public void leaseLost(Volume v, Replica r, String reason) {
        leases.fence(v, "memserver " + r.link().label() + " refused this bridge's access to region " + r.region().id()
                + " (" + reason + "): another client took the volume's lease over there");
    }

    @Override
    public void rebuildWanted(Slab slab) {
        rebuilder.offer(slab);
    }

    @Override
    public void release(Replica r) {
        placement.release(r);
    }

    @Override
    public Duration operationTimeout() {
        return config.operationTimeout();
    }

    @Override
    public long clientOperations() {
        long n = 0;
        for (MemserverLink l : membership.links()) {
            n += l.completed.sum();
        }
        return n;
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
        membership.stop();
        leases.close();
        health.stop();
        rebuilder.close();
        if (hedger != null) {
            hedger.close();
        }
        membership.disconnectAll();
    }

    /** Sleeps, keeping an interrupt for the caller to see. */
    static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
