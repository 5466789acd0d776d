package dev.rbridge.rdma;

import dev.rbridge.common.PeerGroup;

import java.net.InetAddress;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;

/**
 * Admission of a listener's connections under its {@link ConnectionLimits}: each accepted connection asks for a
 * {@link Slot} before anything is allocated for it, tells the slot when it has authenticated, and closes it when it
 * ends. One place for the policy, shared by the transports.
 *
 * <p>Connections that have not authenticated give way rather than keep a newcomer out, oldest first, since an honest
 * client's greeting takes one round trip and is always the newest of its kind:
 * <ul>
 * <li>a newcomer from an address that holds its limit of unauthenticated connections, or of connections in all with
 * some of them unauthenticated, takes the place of that address's oldest unauthenticated one. Refusing it instead let
 * a peer sharing an address with a bridge (a local process, a NAT) hold that address's places with silent connections,
 * reopened at every hello timeout, and keep the bridge from reconnecting;</li>
 * <li>when the unauthenticated connections fill their global limit (or all connections fill theirs and some have not
 * authenticated), a newcomer from an address that holds fewer unauthenticated connections than the address holding
 * the most takes the place of that address's oldest one.</li>
 * </ul>
 * A peer that opens connections and never authenticates can then only crowd out itself, never lock an honest client
 * out for a whole hello timeout. Authenticated connections are never evicted (an idle bridge is still a bridge): a
 * newcomer is refused only when the places it needs are held by authenticated connections, or by an address holding
 * no more unauthenticated ones than its own.
 *
 * <p>An "address" here is a {@link PeerGroup}: an IPv4 address, or an IPv6 /64 (one host's usual share), as on every
 * listener.
 */
public final class ConnectionGate {
    /** Refusal and eviction reasons, as {@link RegionService#refused} counts them. */
    public static final String CONNECTION_LIMIT = "connection_limit";
    /** Refused: its address holds its limit of connections, all authenticated. */
    public static final String PEER_LIMIT = "peer_limit";
    public static final String UNAUTHENTICATED_LIMIT = "unauthenticated_limit";
    /** Evicted: its address held its limit and a newcomer from that address took its place. */
    public static final String UNAUTHENTICATED_PEER_LIMIT = "unauthenticated_peer_limit";
    /** Evicted: the global limits were full and a newcomer from another address took its place. */
    public static final String UNAUTHENTICATED_EVICTED = "unauthenticated_evicted";

    private final ConnectionLimits limits;
    /** By {@link PeerGroup}: an IPv4 address, an IPv6 /64. */
    private final Map<PeerGroup, Peer> peers = new HashMap<>();
    private int total;
    private int unauthenticated;

    public ConnectionGate(ConnectionLimits limits) {
        this.limits = Objects.requireNonNull(limits);
    }

    public ConnectionLimits limits() {
        return limits;
    }

    /** What {@link #admit} decided. */
    public sealed interface Admission permits Admitted, Refused {}

    /**
     * Admitted; {@code evicted}, or null, is the unauthenticated connection that gave up its place for it: the caller
     * cuts it off (its slot is already free) and counts it as {@link Eviction#reason()}.
     */
    public record Admitted(Slot slot, Eviction evicted) implements Admission {
    }

    /** An unauthenticated connection dropped for a newcomer, for {@code reason} (one of the constants): {@code why}. */
    public record Eviction(Slot slot, String reason, String why) {
    }

    /** Refused for {@code reason} (one of the constants); {@code why} says so to an operator. */
    public record Refused(String reason, String why) implements Admission {
    }

    /** Asks for a place for a new, unauthenticated connection from {@code peer}; {@code close} cuts it off. */
    public synchronized Admission admit(InetAddress peer, Runnable close) {
        PeerGroup group = PeerGroup.of(peer);
        Peer p = peers.get(group);
        int fromPeer = p == null ? 0 : p.total;
        int unauthenticatedFromPeer = p == null ? 0 : p.unauthenticated.size();
        Eviction evicted = null;
        if (fromPeer >= limits.maxPerPeer() || unauthenticatedFromPeer >= limits.maxUnauthenticatedPerPeer()) {
            if (unauthenticatedFromPeer == 0) {
                return new Refused(PEER_LIMIT, fromPeer + " connections from " + group
                        + " already, all authenticated (the limit per address)");
            }
            // Its own oldest makes way; that frees a place under the global limits too.
            evicted = new Eviction(p.unauthenticated.peekFirst(), UNAUTHENTICATED_PEER_LIMIT,
                    (fromPeer >= limits.maxPerPeer() ? fromPeer + " connections from " + group
                            + " (the limit per address), " + unauthenticatedFromPeer + " of them"
                            : unauthenticatedFromPeer + " connections from " + group)
                            + " had not authenticated; the newest takes the place of the oldest");
        } else if (total >= limits.maxConnections() || unauthenticated >= limits.maxUnauthenticated()) {
            Slot victim = evictionCandidate(unauthenticatedFromPeer);
            if (victim == null) {
                return total >= limits.maxConnections()
                        ? new Refused(CONNECTION_LIMIT, total + " connections already (the limit)")
                        : new Refused(UNAUTHENTICATED_LIMIT, unauthenticated
                                + " connections have not authenticated yet (the limit)");
            }
            evicted = new Eviction(victim, UNAUTHENTICATED_EVICTED, unauthenticated + " connections had not "
                    + "authenticated (" + total + " in all); one from the address holding the most made room for one "
                    + "from " + peer.getHostAddress());
        }
        if (evicted != null) {
            evicted.slot().release();
        }
        Slot s = new Slot(peer, group, close);
        Peer q = peers.computeIfAbsent(group, k -> new Peer());
        q.total++;
        q.unauthenticated.addLast(s);
        total++;
        unauthenticated++;
        return new Admitted(s, evicted);
    }

    /** The oldest unauthenticated slot of the address holding the most, if it holds more than {@code than}. */
    private Slot evictionCandidate(int than) {
        Peer most = null;
        for (Peer p : peers.values()) {
            if (!p.unauthenticated.isEmpty() && (most == null
                    || p.unauthenticated.size() > most.unauthenticated.size())) {
                most = p;
            }
        }
        return most == null || most.unauthenticated.size() <= than ? null : most.unauthenticated.peekFirst();
    }

    public synchronized int connections() {
        return total;
    }

    public synchronized int unauthenticated() {
        return unauthenticated;
    }

    /** One admitted connection's place. */
    public final class Slot implements AutoCloseable {
        private final InetAddress peer;
        private final PeerGroup group;
        private final Runnable close;
        /** Guarded by the gate. */
        private boolean authenticated;
        private boolean released;

        private Slot(InetAddress peer, PeerGroup group, Runnable close) {
            this.peer = peer;
            this.group = group;
            this.close = close;
        }

        public InetAddress peer() {
            return peer;
        }

        /** Cuts the connection off (an eviction); its thread then ends it and closes the slot. */
        public void cut() {
            close.run();
        }

        /**
         * The connection authenticated: it no longer counts as unauthenticated and is never evicted. False if it was
         * evicted meanwhile (it is being cut off).
         */
        public boolean authenticated() {
            synchronized (ConnectionGate.this) {
                if (released) {
                    return false;
                }
                if (!authenticated) {
                    authenticated = true;
                    peers.get(group).unauthenticated.remove(this);
                    unauthenticated--;
                }
                return true;
            }
        }

        /** The connection ended: its place is free. Idempotent. */
        @Override
        public void close() {
            synchronized (ConnectionGate.this) {
                release();
            }
        }

        /** Call holding the gate's lock. */
        private void release() {
            if (released) {
                return;
            }
            released = true;
            Peer p = peers.get(group);
            p.total--;
            if (!authenticated) {
                p.unauthenticated.remove(this);
                unauthenticated--;
            }
            if (p.total == 0) {
                peers.remove(group);
            }
            total--;
        }
    }

    private static final class Peer {
        int total;
        /** Oldest first. */
        final ArrayDeque<Slot> unauthenticated = new ArrayDeque<>();
    }
}
