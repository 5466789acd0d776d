package dev.rbridge.memserver;

import dev.rbridge.rdma.ConnectionStats;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The {@link Memserver}'s clients connected now, and the transport counters of those that have left, so totals over
 * all clients never go backwards.
 */
final class ConnectedClients {
    private final Set<ClientSession> clients = ConcurrentHashMap.newKeySet();
    private final AtomicLong nextClientId = new AtomicLong(1);
    /** Transport counters of clients that have left. */
    private final ConnectionStats departed = new ConnectionStats();
    /**
     * Makes "a departing client's counters move into {@link #departed} and the client leave {@link #clients}" one
     * step for {@link #transportTotals()}, which reads both: otherwise a scrape in between counts it twice or not at
     * all, and a Prometheus counter that dips reads as a reset.
     */
    private final Object transportTotals = new Object();

    /** A new client of {@code server}, connected now. */
    ClientSession add(Memserver server, String name, String peer) {
        ClientSession c = new ClientSession(server, nextClientId.getAndIncrement(), name, peer);
        clients.add(c);
        return c;
    }

    /** {@code c} has left: its counters move to the totals of those that left. */
    void remove(ClientSession c) {
        synchronized (transportTotals) {
            ConnectionStats st = c.stats;
            if (st != null) {
                departed.add(st.snapshot());
            }
            clients.remove(c);
        }
    }

    /** Transport counters summed over every client since start, those that left included. */
    ConnectionStats.Snapshot transportTotals() {
        ConnectionStats.Snapshot total;
        synchronized (transportTotals) {
            total = departed.snapshot();
            for (ClientSession c : clients) {
                ConnectionStats st = c.stats;
                if (st != null) {
                    total = total.plus(st.snapshot());
                }
            }
        }
        return total;
    }

    /** The clients connected now (a live view). */
    Set<ClientSession> all() {
        return clients;
    }

    int size() {
        return clients.size();
    }

    boolean isEmpty() {
        return clients.isEmpty();
    }
}
