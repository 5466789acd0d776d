package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Rebuilder;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.rdma.RemoteConnection;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.Collection;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The health duty cycle, every 250 ms on thread {@code bridge-health}: notices dead connections, tries the memservers
 * that are down again (each attempt on a thread of its own), resolves the --memserver-dns names again, and once a
 * second follows drains, refreshes the memservers' capacities and offers degraded slabs to the rebuild.
 */
final class HealthDuty {
    /** Logged as the bridge, as before these parts had classes of their own. */
    private static final Logger log = LoggerFactory.getLogger(Bridge.class);
    private static final long TICK_MILLIS = 250;
    private static final long RECONNECT_MILLIS = 1000;

    private final BridgeConfig config;
    private final Membership membership;
    private final Attacher attacher;
    private final Reconnect reconnect;
    private final MemserverDrains drains;
    private final CapacityReporter capacity;
    private final Collection<Volume> volumes;
    private final Rebuilder rebuilder;
    /** Memservers an attempt to bring up is under way for. */
    private final Set<MemserverLink> connecting = ConcurrentHashMap.newKeySet();
    private final Thread thread;

    HealthDuty(BridgeConfig config, Membership membership, Attacher attacher, Reconnect reconnect,
               MemserverDrains drains, CapacityReporter capacity, Collection<Volume> volumes, Rebuilder rebuilder) {
        this.config = config;
        this.membership = membership;
        this.attacher = attacher;
        this.reconnect = reconnect;
        this.drains = drains;
        this.capacity = capacity;
        this.volumes = volumes;
        this.rebuilder = rebuilder;
        this.thread = Thread.ofPlatform().name("bridge-health").daemon().unstarted(this::run);
    }

    void start() {
        thread.start();
    }

    /** Wakes the duty so that it sees the bridge is closing ({@link Membership#stop}). */
    void interrupt() {
        thread.interrupt();
    }

    private void run() {
        long lastInfo = 0;
        long lastDns = System.currentTimeMillis(); // resolved in the bridge's constructor
        while (membership.running()) {
            long now = System.currentTimeMillis();
            try {
                checkLinks(now);
                if (!config.memserverNames().isEmpty() && now - lastDns >= BridgeConfig.DNS_INTERVAL.toMillis()) {
                    lastDns = now;
                    membership.discover();
                }
                if (now - lastInfo >= 1000) {
                    lastInfo = now;
                    everySecond();
                }
            } catch (RuntimeException e) {
                log.error("health check failed", e);
            }
            Bridge.sleep(TICK_MILLIS);
        }
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
