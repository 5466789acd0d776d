package dev.rbridge.rdma;

/**
 * How many connections a memserver's listener holds at once, so that no peer can take what the others need: in all,
 * per peer address, and, among them, connections that have not authenticated yet (in all and per address). A
 * connection costs a thread and, once authenticated, about half a megabyte of buffers (tcp); one that has not
 * authenticated costs a thread and a few kilobytes, and is dropped at the hello timeout anyway. With TLS every
 * connection, authenticated or not, also holds its {@link dev.rbridge.rdma.link.TlsLink}'s buffers (four records in,
 * four out, a record's plaintext: about 150 KiB of heap) from its first byte.
 *
 * @param maxConnections             connections at once, authenticated or not
 * @param maxPerPeer                 of them from one address
 * @param maxUnauthenticated         of them not yet authenticated; when full, the oldest unauthenticated connection
 *                                   of the address holding the most is dropped for a newcomer from another address
 * @param maxUnauthenticatedPerPeer  unauthenticated from one address; when full (or that address holds
 *                                   {@code maxPerPeer}), its oldest unauthenticated connection is dropped for its
 *                                   newcomer (see {@link ConnectionGate})
 */
public record ConnectionLimits(int maxConnections, int maxPerPeer, int maxUnauthenticated,
        int maxUnauthenticatedPerPeer) {
    /** A few bridges with four lanes each and the tools need tens; a thread and ~0.6 MiB each bound the cost. */
    public static final int MAX_CONNECTIONS_DEFAULT = 256;
    /** One host running several bridges and tools; a quarter of the total, so two hosts cannot lock everyone out. */
    public static final int MAX_PER_PEER_DEFAULT = 64;
    /** Authentication takes one round trip: honest clients hold a slot for milliseconds. */
    public static final int MAX_UNAUTHENTICATED_DEFAULT = 64;
    /** Every lane of a bridge connecting at once is four. */
    public static final int MAX_UNAUTHENTICATED_PER_PEER_DEFAULT = 8;

    public static final ConnectionLimits DEFAULTS = new ConnectionLimits(MAX_CONNECTIONS_DEFAULT, MAX_PER_PEER_DEFAULT,
            MAX_UNAUTHENTICATED_DEFAULT, MAX_UNAUTHENTICATED_PER_PEER_DEFAULT);

    public ConnectionLimits {
        if (maxConnections < 1) {
            throw new IllegalArgumentException("--max-connections must be at least 1: " + maxConnections);
        }
        if (maxPerPeer < 1 || maxPerPeer > maxConnections) {
            throw new IllegalArgumentException("--max-connections-per-peer must be from 1 to --max-connections ("
                    + maxConnections + "): " + maxPerPeer);
        }
        if (maxUnauthenticated < 1 || maxUnauthenticated > maxConnections) {
            throw new IllegalArgumentException("--max-unauthenticated must be from 1 to --max-connections ("
                    + maxConnections + "): " + maxUnauthenticated);
        }
        if (maxUnauthenticatedPerPeer < 1 || maxUnauthenticatedPerPeer > Math.min(maxPerPeer, maxUnauthenticated)) {
            throw new IllegalArgumentException("unauthenticated connections per address must be from 1 to "
                    + Math.min(maxPerPeer, maxUnauthenticated) + ": " + maxUnauthenticatedPerPeer);
        }
    }

    /**
     * The three limits an operator sets; unauthenticated connections per address are {@value
     * #MAX_UNAUTHENTICATED_PER_PEER_DEFAULT}, or fewer when the others are smaller.
     */
    public static ConnectionLimits of(int maxConnections, int maxPerPeer, int maxUnauthenticated) {
        return new ConnectionLimits(maxConnections, maxPerPeer, maxUnauthenticated,
                Math.max(1, Math.min(MAX_UNAUTHENTICATED_PER_PEER_DEFAULT, Math.min(maxPerPeer, maxUnauthenticated))));
    }
}
