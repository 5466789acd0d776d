package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Rebuilder;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.common.Failures;
import dev.rbridge.rdma.RemoteConnection;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.Collection;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Emptying memservers: one an operator drains (admin), or one that says it is draining (its operator's {@code drain},
 * a Kubernetes preStop). It takes no new slabs or rebuilds, and its replicas are offered to the rebuild duty until none
 * is left live; then the bridge stops using it (admin) or lets its connection go so that it can exit (its own drain).
 * The health duty calls {@link #follow} once a second.
 */
final class MemserverDrains {
    /** Logged as the bridge, as before these parts had classes of their own. */
    private static final Logger log = LoggerFactory.getLogger(Bridge.class);

    private final Membership membership;
    private final Collection<Volume> volumes;
    private final Rebuilder rebuilder;
    private final CapacityReporter capacity;
    private final AtomicLong drainChecks = new AtomicLong();
    /** Memservers that said they are draining, for the health duty (the answer arrives on a provider's thread). */
    private final Set<MemserverLink> saidDraining = ConcurrentHashMap.newKeySet();
    /** The last failure to ask a memserver's STATE, per memserver, already said in the log. */
    private final Map<MemserverLink, String> stateFailureSaid = new ConcurrentHashMap<>();
    /** Memservers whose drain could not be followed, already said in the log. */
    private final Set<MemserverLink> drainRefusedSaid = ConcurrentHashMap.newKeySet();

    MemserverDrains(Membership membership, Collection<Volume> volumes, Rebuilder rebuilder,
            CapacityReporter capacity) {
        this.membership = membership;
        this.volumes = volumes;
        this.rebuilder = rebuilder;
        this.capacity = capacity;
    }

    /** See {@link Bridge#drainMemserver}. */
    String drainMemserver(String label) {
        synchronized (membership) {
            MemserverLink l = membership.linkNamed(label);
            if (l == null) {
                return "no memserver " + label + " (see admin memservers)";
            }
            String refusal = l.draining() ? null : drainRefusal(l);
            if (refusal != null) {
                return refusal + ": add a memserver first";
            }
            l.drain();
            log.info("memserver {}: draining; {} slab replica(s) to move elsewhere", label, membership.replicasOn(l));
            return null; // the health duty offers them to the rebuild duty within a second (finishDrains)
        }
    }

    /** Why emptying {@code l} would leave too few memservers for some volume's replicas, or null. */
    private String drainRefusal(MemserverLink l) {
        long others = membership.links().stream()
                .filter(x -> x != l && !x.draining() && x.connection() != null).count();
        int most = volumes.stream().mapToInt(v -> v.spec().replicas()).max().orElse(1);
        return others < most ? "draining " + l.label() + " would leave " + others + " memserver(s) up for volumes of "
                + most + " replicas" : null;
    }

    /** Asks {@code l} (up on {@code c}) whether it is draining; a yes is followed at the next {@link #follow}. */
    void askState(MemserverLink l, RemoteConnection c) {
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

    /** The health duty's look at drains, once a second: the memservers that said so, then every draining one. */
    void follow() {
        for (MemserverLink l : saidDraining) {
            saidDraining.remove(l);
            memserverDraining(l);
        }
        finishDrains();
        drainChecks.incrementAndGet();
    }

    /** How many times the health duty has looked for drains to finish: tests wait for a look, not for a time. */
    long drainChecks() {
        return drainChecks.get();
    }

    /**
     * The memserver said it is draining (its operator's {@code drain}, a Kubernetes preStop): empty it as an admin
     * drain would, then let its connection go so that it can exit (it waits for its clients to leave). The link stays:
     * restarted, the memserver is used again. When the others cannot take its replicas, they stay (said once).
     */
    private void memserverDraining(MemserverLink l) {
        synchronized (membership) {
            if (l.draining() || l.connection() == null || l.removed()) {
                return;
            }
            String refusal = drainRefusal(l);
            if (refusal != null) {
                if (drainRefusedSaid.add(l)) {
                    log.warn("memserver {} is draining, but its {} slab replica(s) stay there: {}; add a memserver,"
                            + " or it exits only when its clients leave", l.label(), membership.replicasOn(l), refusal);
                }
                return;
            }
            drainRefusedSaid.remove(l);
            l.drainAsked();
            log.info("memserver {} is draining: moving its {} slab replica(s) elsewhere, then letting it go", l.label(),
                    membership.replicasOn(l));
        }
    }

    /**
     * Draining memservers: the slabs still on them are offered to the rebuild duty again (a copy that found no room,
     * or could not start, is retried), and one that is up and holds nothing live, and no last copy of a lost slab, is
     * let go. A draining memserver that is down is kept: it may hold the only copy of something.
     */
    private void finishDrains() {
        for (MemserverLink l : membership.links()) {
            if (!l.draining()) {
                continue;
            }
            RemoteConnection c = l.connection();
            if (c == null) {
                continue;
            }
            long live = 0;
            for (Volume v : volumes) {
                for (var s : v.roster().slabsOn(c)) {
                    rebuilder.offer(s);
                    live++;
                }
            }
            if (live == 0 && l.drainedByMemserver()) {
                letGo(l);
            } else if (live == 0 && membership.removeMemserver(l.label(), "drained: it holds nothing live") == null) {
                log.info("memserver {}: drained; it holds nothing live and this bridge no longer uses it", l.label());
            }
        }
    }

    /**
     * Ends the connection to a memserver that drained itself and holds nothing live of ours (nor the last copy of a
     * lost slab), so it can exit; the link stays and reconnects once the memserver admits clients again.
     */
    private void letGo(MemserverLink l) {
        synchronized (membership) {
            long lost = membership.lostCopiesOn(l);
            if (lost > 0) {
                if (drainRefusedSaid.add(l)) {
                    log.warn("memserver {} is draining but may hold the last copy of {} lost slab(s): this bridge"
                            + " stays connected; stop it knowing their data is gone", l.label(), lost);
                }
                return;
            }
            membership.release(l, "drained: the memserver is draining and holds nothing live of this bridge's");
            log.info("memserver {}: drained; this bridge let its connection go so it can exit, and uses it again once"
                    + " it admits clients", l.label());
            capacity.recheck();
        }
    }
}
