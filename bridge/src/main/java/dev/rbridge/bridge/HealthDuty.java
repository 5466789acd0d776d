package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Rebuilder;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.common.duty.Duty;
import dev.rbridge.common.duty.DutyCycle;
import dev.rbridge.rdma.RemoteConnection;

import java.time.Duration;
import java.util.Collection;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * The health duty cycle, every 250 ms on thread {@code bridge-health}: notices dead connections, tries the memservers
 * that are down again (each attempt on a thread of its own), resolves the --memserver-dns names again, and once a
 * second follows drains, refreshes the memservers' capacities and offers degraded slabs to the rebuild.
 */
final class HealthDuty implements Duty {
    private static final long TICK_MILLIS = 250;
    private static final long RECONNECT_MILLIS = 1000;

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
        for (Volume v : volumes) {
            v.roster().failClosedReplicas();
            v.degraded().forEach(rebuilder::offer);
        }
    }
}
