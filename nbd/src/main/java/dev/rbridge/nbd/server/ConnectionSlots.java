package dev.rbridge.nbd.server;

import dev.rbridge.common.RateLimitedLog;

import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The connection slots of one {@link NbdServer}, and who makes way when a new connection would pass a limit: at most
 * {@code maxConnections} connections, {@code maxConnectionsPerPeer} from one address. A connection that would pass
 * either takes the slot of the oldest connection of that address still in its handshake (for the global limit, of
 * the address holding the most connections). A connection that has not finished its handshake never costs a session
 * its slot: when none is handshaking, the newcomer is let in on probation and takes the slot of the longest-idle
 * session of that address (for the global limit, of the address holding the most) only once its own handshake is
 * through; idle sessions are otherwise never closed (the kernel keeps them for days). When no session is idle, the
 * new one is refused.
 *
 * <p>Refusals and evictions are counted ({@link NbdServerMetrics}) and logged through the server's rate-limited log.
 */
final class ConnectionSlots {
    private final NbdServerConfig config;
    private final RateLimitedLog limitedLog;
    /** Every open connection, and how many each address has; guarded by {@link #lock}. */
    private final Set<Connection> connections = ConcurrentHashMap.newKeySet();
    private final Map<String, Integer> perPeer = new HashMap<>();
    private final Object lock = new Object();
    /**
     * Connections let in over a limit (the value: which, "peer_limit" or "connection_limit") while still in their
     * handshake, each waiting to take an idle session's slot when it finishes; guarded by {@link #lock}.
     */
    private final Map<Connection, String> probation = new HashMap<>();

    ConnectionSlots(NbdServerConfig config, RateLimitedLog limitedLog) {
        this.config = config;
        this.limitedLog = limitedLog;
    }

    /** Every connection holding a slot now (a live view: iterating it while connections come and go is safe). */
    Set<Connection> connections() {
        return Collections.unmodifiableSet(connections);
    }

    int count() {
        return connections.size();
    }

    /**
     * Gives {@code c} a slot, if need be in place of a connection still in its handshake (the oldest of its address for
     * the per-address limit, of the address holding the most connections for the global one): a connection that has
     * not finished its handshake never costs a session its slot. When none is handshaking but a session is idle,
     * {@code c} is let in over the limit, on probation: the idle session makes way only once {@code c} finishes its
     * own handshake ({@link #enterTransmission}), and a newcomer meanwhile takes {@code c}'s place like any other
     * handshake's. False: refused.
     */
    boolean take(Connection c) {
        Connection evicted;
        String reason;
        synchronized (lock) {
            String from = c.peerAddress();
            int mine = perPeer.getOrDefault(from, 0);
            if (mine >= config.maxConnectionsPerPeer()) {
                reason = "peer_limit";
            } else if (connections.size() >= config.maxConnections()) {
                reason = "connection_limit";
                from = busiestPeer(); // the address holding the most pays, as for idle sessions
            } else {
                reason = null;
            }
            evicted = reason == null ? null : oldestHandshake(from);
            if (evicted == null && reason != null && probation.size() >= maxProbation()) {
                evicted = oldestOnProbation(); // newcomers over the limit still handshaking make way for each other
            }
            if (evicted != null && !evicted.decideToClose("closed in its handshake to make room for a new connection"
                    + " (" + reason.replace('_', ' ') + ")")) {
                evicted = null; // the housekeeper got to it first: its slot is about to free anyway
            }
            if (reason != null && evicted == null) {
                String idleFrom = reason.equals("peer_limit") ? c.peerAddress() : busiestPeer();
                if (longestIdle(idleFrom, null) == null) {
                    config.metrics().connectionRefused(reason);
                    limitedLog.warn(reason, "refusing connection from {}: {} (none is in its handshake, none of {}"
                            + " is idle)", c.peer(),
                            reason.equals("peer_limit") ? "its address already has " + mine
                                    + " connections, the limit"
                                    : "all " + connections.size()
                                            + " connection slots are busy",
                            reason.equals("peer_limit") ? "them" : "the connections of " + idleFrom);
                    return false;
                }
                probation.put(c, reason);
            }
            if (evicted != null) {
                release(evicted);
            }
            connections.add(c);
            perPeer.merge(c.peerAddress(), 1, Integer::sum);
        }
        if (evicted != null) { // decided under the slots lock: nobody else can have claimed it since
            config.metrics().connectionClosed("handshake_evicted");
            limitedLog.warn("handshake_evicted", "connection {} from {}: closed in its handshake to make room for a "
                    + "new connection from {} ({})", evicted.id(), evicted.peer(), c.peer(), reason.replace('_', ' '));
            evicted.closeChannel();
        }
        return true;
    }

    /**
     * {@code c} finished its handshake and enters transmission. One let in over a limit on probation now takes the
     * slot of the longest-idle connection of its address (per-address limit) or of the address holding the most
     * (global limit), unless the limit no longer binds; false when no connection is idle now ({@code c} must close).
     */
    boolean enterTransmission(Connection c) {
        Connection evicted;
        String reason;
        synchronized (lock) {
            reason = probation.remove(c);
            if (reason == null || !connections.contains(c)) {
                return true;
            }
            boolean over = reason.equals("peer_limit")
                    ? perPeer.getOrDefault(c.peerAddress(), 0) > config.maxConnectionsPerPeer()
                    : connections.size() > config.maxConnections();
            if (!over) {
                return true;
            }
            evicted = longestIdle(reason.equals("peer_limit") ? c.peerAddress() : busiestPeer(), c);
            if (evicted == null || !evicted.decideToClose("closed while idle to make room for a new connection ("
                    + reason.replace('_', ' ') + ")")) {
                config.metrics().connectionRefused(reason);
                limitedLog.warn(reason, "refusing connection {} from {} at the end of its handshake: {}", c.id(),
                        c.peer(), "no connection is idle to make room for it (" + reason.replace('_', ' ') + ")");
                release(c);
                return false;
            }
            release(evicted);
        }
        config.metrics().connectionClosed("idle_evicted");
        limitedLog.warn("idle_evicted", "connection {} from {}: closed, idle, to make room for connection {} from {}"
                + " ({})", evicted.id(), evicted.peer(), c.id(), c.peer(), reason.replace('_', ' '));
        evicted.closeChannel();
        return true;
    }

    /** The address with the most connections; guarded by {@link #lock}. */
    private String busiestPeer() {
        return perPeer.entrySet().stream().max(Map.Entry.comparingByValue()).map(Map.Entry::getKey).orElse("");
    }

    /**
     * Connections let in over the limits on probation at once, at most: past it the oldest of them (still in its
     * handshake) makes way for a newcomer, so a flood that never finishes its handshakes holds no more than this over
     * the limit, and costs no session its slot.
     */
    private int maxProbation() {
        return Math.max(4, config.maxConnections() / 16);
    }

    /** The connection on probation accepted first (still in its handshake), or null; guarded by {@link #lock}. */
    private Connection oldestOnProbation() {
        Connection best = null;
        for (Connection x : probation.keySet()) {
            if (!x.closing() && !x.inTransmission() && (best == null || x.acceptedNanos() - best.acceptedNanos() < 0)) {
                best = x;
            }
        }
        return best;
    }

    /** The oldest connection of {@code peerAddress} still in its handshake, or null. */
    private Connection oldestHandshake(String peerAddress) {
        Connection best = null;
        for (Connection x : connections) {
            if (x.peerAddress().equals(peerAddress) && !x.closing() && !x.inTransmission()
                    && (best == null || x.acceptedNanos() - best.acceptedNanos() < 0)) {
                best = x;
            }
        }
        return best;
    }

    /**
     * The session of {@code peerAddress} (in transmission, not {@code except}) idle the longest, for a connection on
     * probation that finished its handshake; null if none is idle.
     */
    private Connection longestIdle(String peerAddress, Connection except) {
        Connection best = null;
        for (Connection x : connections) {
            if (x != except && x.peerAddress().equals(peerAddress) && !x.closing() && x.inTransmission() && x.idle()
                    && (best == null || x.lastActiveNanos() - best.lastActiveNanos() < 0)) {
                best = x;
            }
        }
        return best;
    }

    private void release(Connection c) {
        probation.remove(c);
        if (connections.remove(c)) {
            perPeer.computeIfPresent(c.peerAddress(), (k, n) -> n > 1 ? n - 1 : null);
        }
    }

    /** {@code c} ended (or never started): its slot is free. */
    void free(Connection c) {
        synchronized (lock) {
            release(c);
        }
    }
}
