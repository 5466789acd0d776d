package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Rebuilder;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.common.duty.Duty;
import dev.rbridge.common.duty.DutyCycle;
import dev.rbridge.rdma.RemoteConnection;

import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The health duty cycle, every 250 ms on thread {@code bridge-health}: notices dead connections, tries the memservers
 * that are down again (each attempt on a thread of its own), resolves the --memserver-dns names again, and once a
 * second follows drains, refreshes the memservers' capacities and offers degraded slabs to the rebuild. The slabs are
 * walked only when something may have changed them (a connection closed or replaced, a volume that may have degraded
 * slabs, {@link Volume#lookForDegraded}), and all of them every {@link #SWEEP_MILLIS} as a safety net: at rest the
 * duty's work does not grow with the number of slabs.
 */
final class HealthDuty implements Duty {
    private static final long TICK_MILLIS = 250;
    private static final long RECONNECT_MILLIS = 1000;
    /** How often every slab of every volume is looked at whatever changed (ms). */
    static final long SWEEP_MILLIS = 60_000;

    private final BridgeConfig config;
    private final Membership membership;
    private final MemserverBringUp attacher;
    private final Reconnect reconnect;
    private final MemserverDrains drains;
    private final CapacityReporter capacity;
    private final Collection<Volume> volumes;
    private final Rebuilder rebuilder;
    /** Memservers an attempt to bring up is under way for. */
    private final Set<MemserverLink> connecting = ConcurrentHashMap.newKeySet();
    private DutyCycle cycle;
    /** When the memservers' state and capacities were last looked at, and the names last resolved (ms). */
    private long lastInfo;
    private long lastDns = System.currentTimeMillis(); // resolved in the bridge's constructor
    /** Each memserver's open connection at the last walk of the slabs (null: none, or closed). */
    private final Map<MemserverLink, RemoteConnection> walkedWith = new HashMap<>();
    private long lastSweep;
    /** Once-a-second looks, and the walks of a volume's slabs they made (for tests: none while nothing changes). */
    private final AtomicLong looks = new AtomicLong();
    private final AtomicLong slabWalks = new AtomicLong();

    HealthDuty(BridgeConfig config, Membership membership, MemserverBringUp attacher, Reconnect reconnect,
            MemserverDrains drains, CapacityReporter capacity, Collection<Volume> volumes, Rebuilder rebuilder) {
        this.config = config;
        this.membership = membership;
        this.attacher = attacher;
        this.reconnect = reconnect;
        this.drains = drains;
        this.capacity = capacity;
        this.volumes = volumes;
        this.rebuilder = rebuilder;
    }

    void start() {
        cycle = DutyCycle.start(this, Duration.ofMillis(TICK_MILLIS));
    }

    /** Ends the cycles (the bridge is closing, {@link Membership#stop}), waiting briefly for the one under way. */
    void stop() {
        if (cycle != null) {
            cycle.close(Duration.ofSeconds(2));
        }
    }

    @Override
    public String role() {
        return "bridge-health";
    }

    @Override
    public long doWork() {
        if (!membership.running()) {
            return UNTIL_WOKEN;
        }
        long now = System.currentTimeMillis();
        checkLinks(now);
        if (!config.memserverNames().isEmpty() && now - lastDns >= BridgeConfig.DNS_INTERVAL.toMillis()) {
            lastDns = now;
            membership.discover();
        }
        if (now - lastInfo >= 1000) {
            lastInfo = now;
            everySecond();
        }
        return TimeUnit.MILLISECONDS.toNanos(TICK_MILLIS);
    }

    /** A memserver up without a live connection is down; one down is tried again once its retry time has come. */
    private void checkLinks(long now) {
        for (MemserverLink l : membership.links()) {
            RemoteConnection c = l.connection();
            if (l.state() == MemserverLink.State.UP && c == null) {
                membership.linkDown(l, "connection lost");
            }
            if (l.state() != MemserverLink.State.UP && now >= membership.nextAttempt(l) && connecting.add(l)) {
                // On its own thread: a memserver that accepts but never answers must not stall this loop.
                Thread.ofVirtual().name("bridge-connect-" + l.label()).start(() -> {
                    try {
                        attacher.connect(l, reconnect);
                    } finally {
                        membership.retryAt(l, System.currentTimeMillis() + RECONNECT_MILLIS);
                        connecting.remove(l);
                    }
                });
            }
        }
    }

    private void everySecond() {
        drains.follow();
        for (MemserverLink l : membership.links()) {
            RemoteConnection c = l.connection();
            if (c != null) {
                capacity.refresh(l, c);
                drains.askState(l, c);
            }
        }
        long now = System.currentTimeMillis();
        boolean sweep = now - lastSweep >= SWEEP_MILLIS;
        if (sweep) {
            lastSweep = now;
        }
        boolean connectionsChanged = connectionsChanged();
        for (Volume v : volumes) {
            if (sweep || connectionsChanged) {
                slabWalks.incrementAndGet();
                v.roster().failClosedReplicas();
            }
            if (sweep || v.takeLookForDegraded()) {
                slabWalks.incrementAndGet();
                // Offering a slab asks for the next look too: one that found no room is offered again next second.
                v.degraded().forEach(rebuilder::offer);
            }
        }
        looks.incrementAndGet();
    }

    /** Whether a memserver's connection closed or was replaced since the last call. */
    private boolean connectionsChanged() {
        boolean changed = false;
        List<MemserverLink> links = membership.links();
        walkedWith.keySet().retainAll(links);
        for (MemserverLink l : links) {
            RemoteConnection c = l.connection();
            RemoteConnection open = c != null && c.isOpen() ? c : null;
            if (!walkedWith.containsKey(l) || walkedWith.get(l) != open) {
                walkedWith.put(l, open);
                changed = true;
            }
        }
        return changed;
    }

    /** Walks of a volume's slabs so far (tests). */
    long slabWalks() {
        return slabWalks.get();
    }

    /** Once-a-second looks finished so far (tests). */
    long looks() {
        return looks.get();
    }
}
