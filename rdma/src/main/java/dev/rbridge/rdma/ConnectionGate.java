package dev.rbridge.rdma;

import java.net.InetAddress;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * Admission of a listener's connections under its {@link ConnectionLimits}: each accepted connection asks for a
 * {@link Slot} before anything is allocated for it, tells the slot when it has authenticated, and closes it when it
 * ends. One place for the policy, shared by the transports.
 *
 * <p>When the unauthenticated connections fill their limit (or all connections fill theirs and some have not
 * authenticated), a newcomer from an address that holds fewer unauthenticated connections than the address holding
 * the most takes the place of that address's oldest one: a peer that opens connections and never authenticates can
 * then only crowd out itself, never lock an honest client out for a whole hello timeout. Authenticated connections
 * are never evicted (an idle bridge is still a bridge).
 */
public final class ConnectionGate {
    /** Refusal and eviction reasons, as {@link RegionService#refused} counts them. */
    public static final String CONNECTION_LIMIT = "connection_limit";
    public static final String PEER_LIMIT = "peer_limit";
    public static final String UNAUTHENTICATED_LIMIT = "unauthenticated_limit";
    public static final String UNAUTHENTICATED_PEER_LIMIT = "unauthenticated_peer_limit";
    public static final String UNAUTHENTICATED_EVICTED = "unauthenticated_evicted";

    private final ConnectionLimits limits;
    private final Map<InetAddress, Peer> peers = new HashMap<>();
    private int total;
    private int unauthenticated;

    public ConnectionGate(ConnectionLimits limits) {
        this.limits = Objects.requireNonNull(limits);
    }

    public ConnectionLimits limits() {
        return limits;
    }

    /** What {@link #admit} decided. */
    public sealed interface Admission permits Admitted, Refused {
    }

    /**
     * Admitted; {@code evicted} are unauthenticated connections that gave up their places for it: the caller closes
     * them (their slots are already free) and counts them as {@link #UNAUTHENTICATED_EVICTED}.
     */
    public record Admitted(Slot slot, List<Slot> evicted) implements Admission {
    }

    /** Refused for {@code reason} (one of the constants); {@code why} says so to an operator. */
    public record Refused(String reason, String why) implements Admission {
    }

    /** Asks for a place for a new, unauthenticated connection from {@code peer}; {@code close} cuts it off. */
    public synchronized Admission admit(InetAddress peer, Runnable close) {
        Peer p = peers.get(peer);
        int fromPeer = p == null ? 0 : p.total;
        int unauthenticatedFromPeer = p == null ? 0 : p.unauthenticated.size();
        if (fromPeer >= limits.maxPerPeer()) {
            return new Refused(PEER_LIMIT, fromPeer + " connections from " + peer.getHostAddress()
                    + " already (the limit per address)");
        }
        if (unauthenticatedFromPeer >= limits.maxUnauthenticatedPerPeer()) {
            return new Refused(UNAUTHENTICATED_PEER_LIMIT, unauthenticatedFromPeer
                    + " connections from " + peer.getHostAddress() + " have not authenticated yet (the limit per "
                    + "address)");
        }
        List<Slot> evicted = List.of();
        boolean full = total >= limits.maxConnections();
        if (full || unauthenticated >= limits.maxUnauthenticated()) {
            Slot victim = evictionCandidate(unauthenticatedFromPeer);
            if (victim == null) {
                return full ? new Refused(CONNECTION_LIMIT, total + " connections already (the limit)")
                        : new Refused(UNAUTHENTICATED_LIMIT, unauthenticated
                        + " connections have not authenticated yet (the limit)");
            }
            victim.release();
            evicted = List.of(victim);
        }
        Slot s = new Slot(peer, close);
        Peer q = peers.computeIfAbsent(peer, k -> new Peer());
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
        private final Runnable close;
        /** Guarded by the gate. */
        private boolean authenticated;
        private boolean released;

        private Slot(InetAddress peer, Runnable close) {
            this.peer = peer;
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
                    peers.get(peer).unauthenticated.remove(this);
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
            Peer p = peers.get(peer);
            p.total--;
            if (!authenticated) {
                p.unauthenticated.remove(this);
                unauthenticated--;
            }
            if (p.total == 0) {
                peers.remove(peer);
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
