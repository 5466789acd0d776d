package dev.rbridge.nbd.server;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * How many bytes of payload buffers (WRITE data being received or written, READ data being read or waiting to be
 * sent) the server holds at once: in all, per peer address and per connection. A request whose buffer does not fit
 * waits until buffers come back; it never fails for it. The per-peer share keeps one address's connections from
 * taking everything; the per-connection share keeps one connection's pipeline from taking its peer's share.
 *
 * <p>Each connection has an {@link Account}. {@link Account#tryAcquire} takes the bytes when they fit, or records
 * the account as waiting. Bytes that come back go first to waiting accounts, smallest need (what the account holds
 * plus what it asks) first, and are reserved for them until they ask again; so a connection asking for a little is
 * not starved by others asking for whole payloads they may never send, and a newcomer cannot take what a waiter was
 * promised.
 */
public final class PayloadBudget {
    private static final Comparator<Account> NEED = Comparator.<Account>comparingLong(a -> a.held + a.wanted)
            .thenComparingLong(a -> a.waitOrder);

    private final long total;
    private final long perPeer;
    private final long perConnection;
    private final Map<String, Peer> peers = new HashMap<>();
    private final List<Account> waiting = new ArrayList<>();
    private long used;
    private long waitCounter;

    /**
     * @param total         bytes held at once by every connection together
     * @param perPeer       bytes held at once by the connections of one peer address
     * @param perConnection bytes held at once by one connection
     */
    public PayloadBudget(long total, long perPeer, long perConnection) {
        if (perConnection < 1 || perPeer < perConnection || total < perPeer) {
            throw new IllegalArgumentException("payload budget: need 0 < per connection (" + perConnection
                    + ") <= per peer (" + perPeer + ") <= total (" + total + ")");
        }
        this.total = total;
        this.perPeer = perPeer;
        this.perConnection = perConnection;
    }

    public long total() {
        return total;
    }

    public long perPeer() {
        return perPeer;
    }

    public long perConnection() {
        return perConnection;
    }

    /** Bytes held now, reservations for waiting connections included. */
    public synchronized long used() {
        return used;
    }

    /** Connections waiting for buffers now. */
    public synchronized int waiting() {
        return waiting.size();
    }

    /**
     * Who waits for memory that others hold: connections whose own share has room but whose address's share or the
     * total does not. Memory freed by a connection of {@code peer} would let one of them go on when
     * {@link #wouldHelp} says so. (A connection stopped by its own share waits for itself, and helps nobody.)
     */
    public record Pressure(boolean total, Set<String> peers) {
        static final Pressure NONE = new Pressure(false, Set.of());

        public boolean wouldHelp(String peer) {
            return total || peers.contains(peer);
        }
    }

    public synchronized Pressure pressure() {
        if (waiting.isEmpty()) {
            return Pressure.NONE;
        }
        boolean total = false;
        Set<String> blockedPeers = new HashSet<>();
        for (Account w : waiting) {
            boolean ownRoom = w.held == 0 || w.held + w.wanted <= perConnection;
            if (!ownRoom) {
                continue;
            }
            if (w.peer.held != 0 && w.peer.held + w.wanted > perPeer) {
                blockedPeers.add(w.peerKey);
            } else {
                total = true;
            }
        }
        return new Pressure(total, Set.copyOf(blockedPeers));
    }

    /** A new connection's account; {@code peer} is its address without the port. */
    public synchronized Account open(String peer, Runnable wake) {
        Peer p = peers.computeIfAbsent(peer, k -> new Peer());
        p.connections++;
        return new Account(p, peer, wake);
    }

    /** One address's connections together. */
    private static final class Peer {
        int connections;
        long held;
    }

    /** One connection's part of the budget. */
    public final class Account {
        private final Peer peer;
        private final String peerKey;
        private final Runnable wake;
        private long held;
        /** While waiting: the bytes asked for. */
        private long wanted;
        /** Bytes handed to this account while it waited, counted as held, taken by its next {@link #tryAcquire}. */
        private long reserved;
        private long waitOrder;
        private boolean closed;

        private Account(Peer peer, String peerKey, Runnable wake) {
            this.peer = peer;
            this.peerKey = peerKey;
            this.wake = wake;
        }

        /**
         * Takes {@code bytes} if they fit every share now, for something the caller can do without (a spliced READ's
         * pipe): it neither waits nor touches a reservation made for this account, and false costs nothing.
         */
        public boolean tryTake(long bytes) {
            synchronized (PayloadBudget.this) {
                if (closed || reserved > 0 || wanted != 0 || !waiting.isEmpty() || !fits(this, bytes)) {
                    return false;
                }
                take(this, bytes);
                return true;
            }
        }

        /**
         * Takes {@code bytes} if they fit every share; otherwise marks this account waiting (its wake-up runs when
         * bytes are reserved for it) and returns false. A request larger than a share is admitted when the account
         * (or its peer) holds nothing, so the largest payload the server accepts always gets through eventually.
         */
        public boolean tryAcquire(long bytes) {
            List<Runnable> wakes = List.of();
            try {
                synchronized (PayloadBudget.this) {
                    if (closed) {
                        return false;
                    }
                    if (reserved > 0) {
                        if (reserved == bytes) {
                            reserved = 0;
                            return true;
                        }
                        long r = reserved; // it asks for something else after all: the queue may have those
                        reserved = 0;
                        wakes = giveBack(this, r);
                    }
                    if (fits(this, bytes)) {
                        if (wanted != 0) { // it waited: no longer (the usual case, no wait, costs no scan)
                            waiting.remove(this);
                            wanted = 0;
                        }
                        take(this, bytes);
                        return true;
                    }
                    if (wanted == 0) {
                        waitOrder = waitCounter++;
                        waiting.add(this);
                    }
                    wanted = bytes;
                    return false;
                }
            } finally {
                wakes.forEach(Runnable::run);
            }
        }

        public void release(long bytes) {
            List<Runnable> wakes;
            synchronized (PayloadBudget.this) {
                if (bytes > held - reserved) {
                    throw new IllegalStateException("releasing " + bytes + " bytes of payload budget, holding "
                            + (held - reserved));
                }
                wakes = giveBack(this, bytes);
            }
            wakes.forEach(Runnable::run);
        }

        /** Bytes this connection holds now. */
        public long held() {
            synchronized (PayloadBudget.this) {
                return held;
            }
        }

        /** The connection is gone: it waits no more. Its buffers come back through {@link #release} as usual. */
        public void close() {
            List<Runnable> wakes = List.of();
            synchronized (PayloadBudget.this) {
                if (closed) {
                    return;
                }
                closed = true;
                waiting.remove(this);
                wanted = 0;
                peer.connections--;
                if (reserved > 0) {
                    long r = reserved;
                    reserved = 0;
                    wakes = giveBack(this, r);
                }
                forgetPeerIfDone(this);
            }
            wakes.forEach(Runnable::run);
        }
    }

    private boolean fits(Account a, long bytes) {
        return (a.held == 0 || a.held + bytes <= perConnection)
                && (a.peer.held == 0 || a.peer.held + bytes <= perPeer)
                && (used == 0 || used + bytes <= total);
    }

    private void take(Account a, long bytes) {
        a.held += bytes;
        a.peer.held += bytes;
        used += bytes;
    }

    /** Returns {@code bytes} of {@code from}, then reserves what fits for waiters, smallest need first. */
    private List<Runnable> giveBack(Account from, long bytes) {
        from.held -= bytes;
        from.peer.held -= bytes;
        used -= bytes;
        forgetPeerIfDone(from);
        if (waiting.isEmpty()) {
            return List.of();
        }
        waiting.sort(NEED);
        List<Runnable> wakes = new ArrayList<>();
        for (int i = 0; i < waiting.size(); i++) {
            Account w = waiting.get(i);
            if (fits(w, w.wanted)) {
                take(w, w.wanted);
                w.reserved = w.wanted;
                w.wanted = 0;
                waiting.remove(i--);
                wakes.add(w.wake);
            }
        }
        return wakes;
    }

    private void forgetPeerIfDone(Account a) {
        if (a.closed && a.peer.connections == 0 && a.peer.held == 0) {
            peers.remove(a.peerKey, a.peer);
        }
    }
}
