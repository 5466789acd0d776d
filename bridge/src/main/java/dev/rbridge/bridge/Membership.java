package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.rdma.RemoteConnection;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;

/**
 * The memservers this bridge uses, one {@link MemserverLink} each: added and removed while serving (admin, the
 * addresses of --memserver-dns names), and taken down when their connection dies. Its monitor orders the changes of
 * membership, the bringing up of a memserver ({@link MemserverBringUp}), drains ({@link MemserverDrains}) and the growth of a
 * volume: one at a time.
 */
final class Membership {
    /** Logged as the bridge, as before these parts had classes of their own. */
    private static final Logger log = LoggerFactory.getLogger(Bridge.class);

    private final BridgeConfig config;
    /** Every memserver this bridge uses; grows and shrinks while it serves (admin, DNS), so copy-on-write. */
    private final List<MemserverLink> links;
    /** The links that came from a DNS name, and which: only those go when the name stops listing them. */
    private final Map<MemserverLink, String> fromDns = new ConcurrentHashMap<>();
    /** When the health duty may try to bring each memserver up again (System.currentTimeMillis). */
    private final Map<MemserverLink, Long> nextAttempt = new ConcurrentHashMap<>();
    private final Map<String, Volume> volumes;
    private final LeaseKeeper leases;
    private final CapacityReporter capacity;
    /** Told of every memserver added and removed while serving (metrics register and drop its series). */
    private volatile Consumer<MemserverLink> memserverAdded = l -> {
    };
    private volatile Consumer<MemserverLink> memserverRemoved = l -> {
    };
    /** False once the bridge is closing: no memserver is brought up after that. */
    private volatile boolean running = true;

    Membership(BridgeConfig config, List<MemserverLink> links, Map<String, Volume> volumes, LeaseKeeper leases,
            CapacityReporter capacity) {
        this.config = config;
        this.links = links;
        this.volumes = volumes;
        this.leases = leases;
        this.capacity = capacity;
    }

    /** The links, live (copy-on-write): placement, capacity and the duties read them. */
    List<MemserverLink> links() {
        return links;
    }

    boolean running() {
        return running;
    }

    /** The bridge is closing: no memserver is brought up from now on, and the health duty ends. */
    void stop() {
        running = false;
    }

    /** When the health duty may next try to bring {@code l} up (0: at once). */
    long nextAttempt(MemserverLink l) {
        return nextAttempt.getOrDefault(l, 0L);
    }

    void retryAt(MemserverLink l, long millis) {
        nextAttempt.put(l, millis);
    }

    /** {@code added} and {@code removed} hear of every memserver added and removed from now on. */
    void onMembership(Consumer<MemserverLink> added, Consumer<MemserverLink> removed) {
        this.memserverAdded = Objects.requireNonNull(added);
        this.memserverRemoved = Objects.requireNonNull(removed);
    }

    /** See {@link Bridge#addMemserver}. */
    synchronized MemserverLink addMemserver(InetSocketAddress address, String why) {
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

    /** See {@link Bridge#removeMemserver}. */
    synchronized String removeMemserver(String label, String why) {
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
        capacity.recheck();
        return null;
    }

    /**
     * Stops using {@code l}'s connection without taking replicas out (it holds none live): its leases given back, the
     * connection closed, its manifest copies forgotten. Removal and letting a drained memserver go share this.
     */
    void release(MemserverLink l, String reason) {
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
    long lostCopiesOn(MemserverLink l) {
        return volumes.values().stream().mapToLong(v -> v.roster().lostCopiesOn(l)).sum();
    }

    /** Live replicas {@code l} holds, of every volume (none while it is down). */
    long replicasOn(MemserverLink l) {
        RemoteConnection c = l.connection();
        return c == null ? 0 : volumes.values().stream().mapToLong(v -> v.roster().replicasOn(c)).sum();
    }

    /** The link labelled {@code label} (HOST:PORT as admin shows it), or null. */
    MemserverLink linkNamed(String label) {
        return links.stream().filter(x -> x.label().equals(label)).findFirst().orElse(null);
    }

    /**
     * Resolves every --memserver-dns name: new addresses become memservers; addresses the name no longer lists go
     * when they hold nothing live (a pod replaced under a headless Service leaves its old address down). A name that
     * does not resolve now changes nothing.
     */
    void discover() {
        for (InetSocketAddress name : config.memserverNames()) {
            Set<InetSocketAddress> now = new LinkedHashSet<>();
            try {
                for (InetAddress a : InetAddress.getAllByName(name.getHostString())) {
                    now.add(new InetSocketAddress(a, name.getPort()));
                }
            } catch (UnknownHostException e) {
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

    /** {@code l}'s connection died or is no use ({@code reason}): its replicas are taken out of every volume. */
    synchronized void linkDown(MemserverLink l, String reason) {
        RemoteConnection dead = l.down(reason);
        if (dead == null) {
            return;
        }
        log.warn("memserver {} is down: {}; its replicas are taken out", l.label(), reason);
        dead.close();
        volumes.values().forEach(v -> v.manifest().forget(l));
        for (Volume v : volumes.values()) {
            v.roster().connectionLost(dead, "memserver " + l.label() + " down: " + reason);
        }
        capacity.recheck();
    }

    /** At close: every memserver's leases given back and its connection closed. Regions stay for a restart. */
    void disconnectAll() {
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
}
