package dev.rbridge.ops.http;

import dev.rbridge.common.Closeables;
import dev.rbridge.common.PeerGroup;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.channels.SelectionKey;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One server's connections and the slots they hold: accepts newcomers a few at a time, caps connections globally
 * and per peer address ({@link PeerGroup}), and at a cap evicts the oldest evictable connection (waiting for or
 * half-way through a request, or stalling its answer), preferring the peer holding the most, before it refuses a
 * newcomer with a 503. Selector thread only, but {@link #open()}.
 */
final class HttpConnectionSlots {
    private static final int ACCEPTS_PER_ROUND = 16;
    /** How long a failing accept (out of file descriptors) pauses accepting, instead of spinning on it. */
    private static final long ACCEPT_BACKOFF_NANOS = TimeUnit.MILLISECONDS.toNanos(100);

    private final WorkerPool workers;
    /** The listener's registration: its channel is the listener, its selector the selector thread's. */
    private final SelectionKey acceptKey;
    private final OpsHttpConfig config;
    private final RefusalLog refusals;
    private final AtomicInteger open = new AtomicInteger();
    // selector thread only
    private final List<HttpConnection> conns = new ArrayList<>();
    /** By {@link PeerGroup}: an IPv4 address, an IPv6 /64. */
    private final Map<PeerGroup, Integer> perPeer = new HashMap<>();
    private long acceptPausedUntil;
    private boolean acceptPaused;

    /** Connections get {@code workers}' settings and refusal log: the server's. */
    HttpConnectionSlots(WorkerPool workers, SelectionKey acceptKey) {
        this.workers = workers;
        this.acceptKey = acceptKey;
        this.config = workers.config();
        this.refusals = workers.refusals();
    }

    /** Connections open now; any thread. */
    int open() {
        return open.get();
    }

    /** The connections now, to go through while they may close. */
    List<HttpConnection> snapshot() {
        return new ArrayList<>(conns);
    }

    /** Takes the newcomers waiting to be accepted (a few). */
    void accept() {
        // a few per round, so a flood of connects cannot keep the loop from reading the connections it has
        for (int i = 0; i < ACCEPTS_PER_ROUND; i++) {
            SocketChannel ch;
            try {
                ch = ((ServerSocketChannel) acceptKey.channel()).accept();
            } catch (IOException e) {
                // out of file descriptors, typically: stop accepting for a moment instead of spinning on it
                refusals.warn("accept", "accept failed: " + e.getMessage());
                acceptKey.interestOps(0);
                acceptPaused = true;
                acceptPausedUntil = System.nanoTime() + ACCEPT_BACKOFF_NANOS;
                return;
            }
            if (ch == null) {
                return;
            }
            try {
                admit(ch);
            } catch (IOException | RuntimeException e) {
                Closeables.closeQuietly(ch);
                refusals.warn("admit", "could not take a connection: " + e);
            }
        }
    }

    /**
     * Accepts again once a failed accept's pause is over; returns {@code next}, or the pause's end when it is
     * nearer.
     */
    long resumeAccepting(long now, long next) {
        if (acceptPaused) {
            if (now - acceptPausedUntil >= 0) {
                acceptPaused = false;
                acceptKey.interestOps(SelectionKey.OP_ACCEPT);
            } else {
                return acceptPausedUntil;
            }
        }
        return next;
    }

    private void admit(SocketChannel ch) throws IOException {
        InetSocketAddress peer = (InetSocketAddress) ch.getRemoteAddress();
        PeerGroup peerAddress = PeerGroup.of(peer.getAddress());
        Refusal cap = capMet(peerAddress);
        if (cap != null) {
            // may finish an answer or find its peer gone, freeing a slot
            probeStalledAnswers(cap == Refusal.PEER_LIMIT ? peerAddress : null);
            cap = capMet(peerAddress);
            if (cap != null) {
                HttpConnection victim = oldestEvictable(cap == Refusal.PEER_LIMIT ? peerAddress : null,
                        System.nanoTime());
                if (victim == null) {
                    refuseNew(ch, cap, cap == Refusal.PEER_LIMIT
                            ? "peer " + peerAddress + " has " + config.maxConnectionsPerPeer()
                                    + " connections, all busy"
                            : config.maxConnections() + " connections, all busy");
                    return;
                }
                victim.evict();
            }
        }
        ch.configureBlocking(false);
        ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
        HttpConnection c = new HttpConnection(ch, peer, (InetSocketAddress) ch.getLocalAddress(), config, refusals,
                workers, this);
        c.register(acceptKey.selector());
        conns.add(c);
        perPeer.merge(peerAddress, 1, Integer::sum);
        open.incrementAndGet();
    }

    /** The cap a newcomer from {@code peer} meets, the per-peer one first; null when it fits. */
    private Refusal capMet(PeerGroup peer) {
        if (perPeer.getOrDefault(peer, 0) >= config.maxConnectionsPerPeer()) {
            return Refusal.PEER_LIMIT;
        }
        return conns.size() >= config.maxConnections() ? Refusal.CONNECTION_LIMIT : null;
    }

    /**
     * Tries a write on every answer (of {@code peer}'s, or any) that looks stalled, before one is taken for
     * stalled. The kernel reports a socket writable only once a third of its send buffer is free, which a peer
     * reading slowly can take seconds to free: only a write tells it from a peer that reads nothing.
     */
    private void probeStalledAnswers(PeerGroup peer) {
        long now = System.nanoTime();
        for (HttpConnection c : snapshot()) {
            if (!c.isClosed() && (peer == null || c.peerGroup().equals(peer)) && c.evictable(now) && c.writing()) {
                c.probe();
            }
        }
    }

    /**
     * The connection to evict for a newcomer: of {@code peer}'s, or (null) of the peer holding the most evictable
     * ones, the one that has waited longest in its current state; null when none is evictable.
     */
    private HttpConnection oldestEvictable(PeerGroup peer, long now) {
        Map<PeerGroup, Integer> evictable = new HashMap<>();
        List<HttpConnection> candidates = new ArrayList<>();
        for (HttpConnection c : conns) {
            if (c.evictable(now) && (peer == null || c.peerGroup().equals(peer))) {
                evictable.merge(c.peerGroup(), 1, Integer::sum);
                candidates.add(c);
            }
        }
        HttpConnection best = null;
        for (HttpConnection c : candidates) {
            if (best == null) {
                best = c;
                continue;
            }
            int mine = evictable.get(c.peerGroup());
            int theirs = evictable.get(best.peerGroup());
            if (mine > theirs || (mine == theirs && c.since() - best.since() < 0)) {
                best = c;
            }
        }
        return best;
    }

    /** Tells the newcomer why in one short non-blocking write (if its buffer takes it), then closes. */
    private void refuseNew(SocketChannel ch, Refusal reason, String why) {
        refusals.refused(reason, "refused a connection from " + remote(ch) + ": " + why);
        try {
            ch.configureBlocking(false);
            ch.write(config.errorPage().render(503, "too many connections; try again later").encode(false, true));
        } catch (IOException | RuntimeException e) {
            // the refusal is counted and logged; a peer that cannot take its 503 loses nothing more
        }
        Closeables.closeQuietly(ch);
    }

    /** A connection closed: its slot is free. */
    void release(HttpConnection c) {
        conns.remove(c);
        perPeer.computeIfPresent(c.peerGroup(), (a, n) -> n > 1 ? n - 1 : null);
        open.decrementAndGet();
    }

    /** Closes every connection (the server stops). */
    void closeAll() {
        for (HttpConnection c : snapshot()) {
            c.close();
        }
    }

    private static String remote(SocketChannel ch) {
        try {
            return String.valueOf(ch.getRemoteAddress());
        } catch (IOException e) {
            return "(gone)";
        }
    }
}
