package dev.rbridge.bridge.memservers;

import dev.rbridge.bridge.placement.PlacementCandidate;
import dev.rbridge.rdma.RemoteConnection;

import java.net.InetSocketAddress;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

/**
 * The bridge's view of one configured memserver: the current connection (null while it is unreachable), what it
 * last said about its free capacity, and why it is down. Replicas bind to a specific {@link RemoteConnection}, so a
 * reconnect never revives a replica that was failed on the old one.
 */
public final class MemserverLink implements PlacementCandidate {
    public enum State {
        CONNECTING, UP, DOWN;

        /** The state as admin shows it: connecting, up, down. */
        public String label() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    private final String label;
    private final InetSocketAddress address;
    private volatile RemoteConnection connection;
    private volatile State state = State.CONNECTING;
    /** Being emptied: never chosen for new slabs or rebuilds, and its replicas are moved elsewhere. */
    private volatile boolean draining;
    /**
     * The memserver itself is draining (it said so): once emptied the bridge lets its connection go and keeps the
     * link, so the memserver can exit and, restarted, is used again.
     */
    private volatile boolean drainedByMemserver;
    /** No longer used by the bridge: a connect that was under way when it was removed must not bring it up. */
    private volatile boolean removed;
    private volatile String serverId = "";
    private volatile long capacityBytes;
    private volatile long freeBytes;
    private volatile String lastError = "";
    private volatile long downSinceNanos = System.nanoTime();
    /** Regions this bridge placed on it since it came up and has not yet seen in a capacity report. */
    public final AtomicLong reserved = new AtomicLong();
    /** Data operations issued to it and not yet complete (reads, writes, zeroes of the data path and rebuilds). */
    public final AtomicLong inFlight = new AtomicLong();
    /** Data operations issued to it that completed, failed or not: whether it made progress since some moment. */
    public final java.util.concurrent.atomic.LongAdder completed = new java.util.concurrent.atomic.LongAdder();
    /**
     * Until when (System.nanoTime) reads prefer other replicas: another replica answered a hedged read before it, so
     * it stalled lately. A hint, not a state: 0, or a time that has passed, means no preference.
     */
    public volatile long readsAvoidedUntil;

    /** Where this memserver's data-path operations are recorded. */
    public final RemoteOpMetrics metrics;

    /** {@code metrics} gives the recorder for a memserver's label (HOST:PORT), asked once here. */
    public MemserverLink(InetSocketAddress address, Function<String, RemoteOpMetrics> metrics) {
        this.address = address;
        this.label = address.getHostString() + ":" + address.getPort();
        this.metrics = metrics.apply(label);
    }

    public String label() {
        return label;
    }

    public InetSocketAddress address() {
        return address;
    }

    /** The live connection, or null when the memserver is not usable now. */
    public RemoteConnection connection() {
        RemoteConnection c = connection;
        return c != null && state == State.UP && c.isOpen() ? c : null;
    }

    /** Whether it has a live connection now (it can take regions): as {@link #connection()} is not null. */
    @Override
    public boolean up() {
        return connection() != null;
    }

    public State state() {
        return state;
    }

    public String serverId() {
        return serverId;
    }

    public long capacityBytes() {
        return capacityBytes;
    }

    /** Free capacity as last reported, less what this bridge allocated since. */
    @Override
    public long freeBytes() {
        return Math.max(0, freeBytes - reserved.get());
    }

    /** Whether the bridge is moving every replica off this memserver (admin drain-memserver, or its own drain). */
    @Override
    public boolean draining() {
        return draining;
    }

    /** Whether the memserver asked for it ({@link #drainAsked}), rather than the bridge's admin. */
    public boolean drainedByMemserver() {
        return drainedByMemserver;
    }

    public void drain() {
        draining = true;
    }

    /** The memserver said it is draining: empty it, then let it go (see {@link #drainedByMemserver}). */
    public void drainAsked() {
        if (!draining) {
            drainedByMemserver = true;
        }
        draining = true;
    }

    public boolean removed() {
        return removed;
    }

    public void remove() {
        removed = true;
    }

    public String lastError() {
        return lastError;
    }

    public long downForMillis() {
        return state == State.UP ? 0 : (System.nanoTime() - downSinceNanos) / 1_000_000;
    }

    public void up(RemoteConnection c, String serverId, long capacity, long free) {
        if (drainedByMemserver) { // it admitted us again, so it is no longer draining: a restarted memserver
            drainedByMemserver = false;
            draining = false;
        }
        this.connection = c;
        this.serverId = serverId;
        this.capacityBytes = capacity;
        this.freeBytes = free;
        this.reserved.set(0);
        this.lastError = "";
        this.state = State.UP;
    }

    public void capacity(long capacity, long free) {
        this.capacityBytes = capacity;
        this.freeBytes = free;
        this.reserved.set(0);
    }

    /** Marks it down; returns the connection it had (to be closed by the caller), or null if it was down already. */
    public RemoteConnection down(String reason) {
        RemoteConnection c = connection;
        connection = null;
        lastError = reason;
        if (state != State.DOWN) {
            downSinceNanos = System.nanoTime();
        }
        state = State.DOWN;
        return c;
    }

    public void connectFailed(String reason) {
        lastError = reason;
        state = State.DOWN;
    }

    @Override
    public String toString() {
        return "memserver " + label;
    }
}
