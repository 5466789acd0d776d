package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.common.Failures;
import dev.rbridge.common.duty.Duty;
import dev.rbridge.common.duty.DutyCycle;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.Collection;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BiConsumer;

/**
 * The bridge's ownership of its volumes on the memservers: renews the leases, decides what a refused lease means and
 * fences a volume whose lease went to someone else.
 *
 * <p>A lease is a connection's, so a reconnect takes it over from this bridge's own previous connection (the keys
 * rotate; the regions are opened again). Losing it to anyone else fences the volume ({@link Volume#fence}): a renewal
 * refused with {@code LEASE_HELD} or granted as a new lease (someone held it in between), a reconnect granted the
 * lease after another owner had it there ({@link #grantedOnReconnect}), a reconnect refused with
 * {@code LEASE_HELD} once the previous connection's lease has certainly lapsed, or, on a memserver where this process
 * never held it, refused for longer than a ttl (the holder may be this bridge's previous process until then: see
 * {@link #refusedOnReconnect}), a key or a region refused as another client's ({@code ACCESS_DENIED}). The fenced
 * volume fails every request with EIO, is logged once, shows as {@code fenced}, and its leases elsewhere are given
 * back so that its new owner can have them.
 *
 * <p>It is a role with a thread of its own: a lease is renewed, every third of its ttl, on the connection it was
 * granted on, from the moment it was granted. Nothing else the bridge does (a start that waits for a memserver, a
 * reconnect opening its regions, a resynchronization) may hold a renewal back: a lease left to lapse is anyone's to
 * take, and taking it rotates the keys this bridge uses.
 */
final class LeaseKeeper implements Duty, AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(LeaseKeeper.class);
    /** Room for the memserver's clock running a little slower than this one over one ttl. */
    private static final long LEASE_CLOCK_SLACK_NANOS = TimeUnit.SECONDS.toNanos(1);
    /** How long a close waits for the renewals under way. */
    private static final long CLOSE_WAIT_NANOS = TimeUnit.SECONDS.toNanos(1);

    private final BridgeConfig config;
    private final Collection<Volume> volumes;
    /** Takes a memserver down (its connection closed, its replicas failed) with a reason. */
    private final BiConsumer<MemserverLink, String> linkDown;
    /**
     * Per memserver and volume, when the lease last granted there lapses at the latest (System.nanoTime): until then a
     * LEASE_HELD after a reconnect may be this bridge's own previous connection, which the memserver has not yet seen
     * end (a cut network sends no FIN); after it, it is someone else.
     */
    private final Map<MemserverLink, Map<Volume, Long>> leasedUntil = new ConcurrentHashMap<>();
    /**
     * Per memserver and volume, when it first refused this bridge the lease with LEASE_HELD since the lease was last
     * granted there (System.nanoTime); see {@link #refusedOnReconnect}.
     */
    private final Map<MemserverLink, Map<Volume, Long>> refusedSince = new ConcurrentHashMap<>();
    /**
     * Per memserver, the connection that took leases there and the volumes it took: renewed on that connection, even
     * before the link is up (a connect still opening its regions), until it closes or another connection takes over.
     */
    private final Map<MemserverLink, Holding> holdings = new ConcurrentHashMap<>();
    /** Per memserver and volume, what the memserver said of the volume's owners at this process's last grant there. */
    private final Map<MemserverLink, Map<Volume, Seen>> seen = new ConcurrentHashMap<>();
    private volatile DutyCycle cycle;
    private volatile boolean running = true;

    /**
     * What a memserver instance said of a volume's lease at this process's last grant there: its count of owner
     * changes ({@link Lease#ownerChanges}), the grant's epoch and its secret lease id ({@link Lease#NO_EPOCH} and
     * {@link Lease#NO_ID} from memservers that predate them).
     */
    private record Seen(String serverId, long ownerChanges, long epoch, long leaseId) {
        static Seen of(RemoteConnection c, Lease lease) {
            return new Seen(c.server().serverId(), lease.ownerChanges(), lease.epoch(), lease.leaseId());
        }

        boolean known() {
            return ownerChanges != Lease.UNKNOWN_OWNER_CHANGES;
        }

        /** The lease id is a secret: never printed. */
        @Override
        public String toString() {
            return "Seen[serverId=" + serverId + ", ownerChanges=" + ownerChanges + ", epoch=" + epoch + "]";
        }
    }

    /**
     * The lease id to present to memserver {@code l} (on connection {@code c}) for volume {@code v}: the id of this
     * process's last grant there, if that was the same memserver instance; else none.
     */
    long leaseId(MemserverLink l, RemoteConnection c, Volume v) {
        Seen before = seen.getOrDefault(l, Map.of()).get(v);
        return before != null && before.serverId().equals(c.server().serverId()) ? before.leaseId() : Lease.NO_ID;
    }

    /** {@code renewing}: a renewal pass on this connection is under way (sending may block on a full socket). */
    private record Holding(RemoteConnection connection, Set<Volume> volumes, AtomicBoolean renewing) {
        Holding(RemoteConnection connection) {
            this(connection, ConcurrentHashMap.newKeySet(), new AtomicBoolean());
        }
    }

    LeaseKeeper(BridgeConfig config, Collection<Volume> volumes,
            BiConsumer<MemserverLink, String> linkDown) {
        this.config = config;
        this.volumes = volumes;
        this.linkDown = linkDown;
    }

    /** Starts renewing, every third of the lease's time to live; before the first lease is taken. */
    void start() {
        cycle = DutyCycle.start(this, renewalInterval());
    }

    private Duration renewalInterval() {
        return config.leaseTtl().dividedBy(3);
    }

    @Override
    public String role() {
        return "bridge-lease";
    }

    /** A renewal pass ({@link #renew()}); the next one a third of the lease's time to live later. */
    @Override
    public long doWork() {
        renew();
        return renewalInterval().toNanos();
    }

    /** Stops renewing (the leases lapse, or are given back by {@link #giveBack}). */
    @Override
    public void close() {
        running = false;
        // A renewal sent after the leases are given back would take them again, and the next start would find them
        // taken over rather than given back (a needless resynchronization): wait, briefly, for the passes under way.
        long deadline = System.nanoTime() + CLOSE_WAIT_NANOS;
        DutyCycle c = cycle;
        if (c != null) {
            c.close(Duration.ofNanos(CLOSE_WAIT_NANOS));
        }
        try {
            while (holdings.values().stream().anyMatch(h -> h.renewing().get()) && System.nanoTime() < deadline) {
                Thread.sleep(5);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** The link to a memserver stays down, and is tried again, until a lease it was refused may be granted. */
    static final class LeaseWait extends Exception {
        LeaseWait(String message) {
            super(message, null, false, false);
        }
    }

    /**
     * Renews every lease held, on the connection that took it; a volume fenced since is left to lapse. Each memserver's
     * pass runs on a virtual thread of its own: one whose socket is full (sending blocks until its watchdog gives up)
     * must not hold back the renewals on the others. A memserver whose previous pass is still sending is skipped.
     */
    void renew() {
        for (var e : holdings.entrySet()) {
            MemserverLink l = e.getKey();
            Holding h = e.getValue();
            if (!h.connection().isOpen()) {
                holdings.remove(l, h); // its leases ended with it
                continue;
            }
            if (h.renewing().compareAndSet(false, true)) {
                Thread.ofVirtual().name("bridge-lease-" + l.label()).start(() -> {
                    try {
                        renew(l, h);
                    } catch (RuntimeException x) {
                        log.error("renewing the leases on memserver {} failed", l.label(), x);
                    } finally {
                        h.renewing().set(false);
                    }
                });
            }
        }
    }

    private void renew(MemserverLink l, Holding h) {
        RemoteConnection c = h.connection();
        for (Volume v : h.volumes()) {
            if (v.fenced() != null || !running) {
                continue;
            }
            Seen before = seen.getOrDefault(l, Map.of()).get(v);
            c.lease(v.name(), config.owner(), config.leaseTtl(), leaseId(l, c, v)).whenComplete((lease, x) -> {
                if (x == null) {
                    if (lease.tookOver() || ownersChangedSince(l, c, v, lease)) {
                        // A renewal on the connection that holds the lease is neither: someone held the volume
                        // between this bridge's renewals, and the keys this bridge uses are gone.
                        fence(v, "memserver " + l.label() + " granted this bridge's lease renewal as a new lease: "
                                + "another client held the volume there since the previous renewal");
                    } else if (lease.hasEpoch() && before != null && before.epoch() != lease.epoch()) {
                        // Nobody else had the volume, but the memserver granted the renewal in a new epoch (the
                        // lease was no longer this connection's to renew): the keys rotated. Reconnecting opens the
                        // regions for the new ones.
                        renewed(l, c, v, lease);
                        if (l.connection() == c) {
                            linkDown.accept(l, "the renewal of volume " + v.name() + "'s lease was granted in a new "
                                    + "epoch (new keys), though nobody else had the volume; reconnecting opens its "
                                    + "regions for the new keys");
                        }
                    } else {
                        renewed(l, c, v, lease);
                    }
                    return;
                }
                Throwable t = Failures.cause(x);
                if (t instanceof RemoteMemoryException r && r.status() == Status.LEASE_HELD) {
                    fence(v, "memserver " + l.label() + " refused this bridge's lease renewal (" + r.getMessage()
                            + "): another client took the volume over after this bridge's lease lapsed");
                    return;
                }
                if (l.connection() == c) {
                    linkDown.accept(l, "lease renewal failed: " + Failures.reason(t));
                } // a connection not up yet: its connect fails on its own
            });
        }
    }

    /** A renewal on {@code c} was granted: counts only while {@code c} is still the connection holding there. */
    private void renewed(MemserverLink l, RemoteConnection c, Volume v, Lease lease) {
        Holding h = holdings.get(l);
        if (h != null && h.connection() == c) {
            record(l, c, v, lease);
        }
    }

    /** The memserver lets the lease lapse at most its ttl after answering, which is before now. */
    private void record(MemserverLink l, RemoteConnection c, Volume v, Lease lease) {
        leasedUntil.computeIfAbsent(l, k -> new ConcurrentHashMap<>())
                .put(v, System.nanoTime() + config.leaseTtl().toNanos() + LEASE_CLOCK_SLACK_NANOS);
        seen.computeIfAbsent(l, k -> new ConcurrentHashMap<>()).put(v, Seen.of(c, lease));
    }

    /**
     * Whether {@code lease}, granted on {@code c}, says that the volume's lease went to another owner there since this
     * process's last grant or renewal there: both counts known, from the same memserver instance (a restarted one
     * counts afresh), and different.
     */
    private boolean ownersChangedSince(MemserverLink l, RemoteConnection c, Volume v, Lease lease) {
        Seen before = seen.getOrDefault(l, Map.of()).get(v);
        Seen now = Seen.of(c, lease);
        if (before == null || !before.serverId().equals(now.serverId())) {
            return false;
        }
        if (lease.continued() != null && before.leaseId() != Lease.NO_ID) {
            // The memserver continued the lease whose secret id this bridge presented only if nobody else was
            // granted the volume, or touched its regions, since: owner strings, which anyone can print, play no part.
            return !lease.continued();
        }
        return before.known() && now.known() && before.ownerChanges() != now.ownerChanges();
    }

    /**
     * Memserver {@code l} granted {@code v}'s lease on connection {@code c}, which renews it from now on. Returns whether another owner had the
     * volume there since this process's last grant or renewal there (see {@link #grantedOnReconnect}).
     */
    boolean granted(MemserverLink l, RemoteConnection c, Volume v, Lease lease) {
        boolean changed = ownersChangedSince(l, c, v, lease);
        holdings.compute(l, (k, h) -> h != null && h.connection() == c ? h : new Holding(c)).volumes().add(v);
        record(l, c, v, lease);
        Map<Volume, Long> refused = refusedSince.get(l);
        if (refused != null) {
            refused.remove(v);
        }
        return changed;
    }

    /**
     * Memserver {@code l} granted volume {@code v}'s lease as this bridge reconnected: fences {@code v} when another
     * owner had the volume there since this process last held it there ({@code ownersChanged}, from
     * {@link #granted}). That bridge may have moved or rebuilt slabs and written to them, and gave the lease back or
     * lost it since: what this bridge knows of the volume is stale, and serving from it could return old data. The
     * memserver counts the owner changes, so a grant whose reply this bridge lost hides none. A grant after another
     * owner on a memserver this process never held the lease on is let be: that owner may be this bridge's previous
     * process (see {@link #refusedOnReconnect}).
     */
    void grantedOnReconnect(MemserverLink l, Volume v, boolean ownersChanged) {
        if (ownersChanged) {
            fence(v, "memserver " + l.label() + " granted this bridge's new connection the lease, but another bridge "
                    + "held the volume there since this one did: it may have moved, rebuilt or written slabs this "
                    + "bridge cannot see");
        }
    }

    /**
     * Memserver {@code l} refused volume {@code v}'s lease with {@code LEASE_HELD} as this bridge reconnected: waits
     * (throws {@link LeaseWait}) while the lease may still be this bridge's own, fences {@code v} once it cannot be.
     * <ul>
     * <li>This process held the lease there: until that lease has certainly lapsed, the holder may be its own previous
     * connection, which the memserver has not seen end (a cut network sends no FIN); after, someone took it.</li>
     * <li>This process never held it there: the holder may be this bridge's previous process, restarted while the
     * memserver was cut off (the memserver keeps a connection it did not see end, and its lease, until the ttl runs
     * out). Fencing at once would stop the volume for good over a lease about to lapse; a lease refused for longer than
     * a ttl after the first refusal is no previous process's, as nothing renewed it since this one started.</li>
     * </ul>
     */
    void refusedOnReconnect(MemserverLink l, Volume v, RemoteMemoryException r) throws LeaseWait {
        long now = System.nanoTime();
        Long since = refusedSince.computeIfAbsent(l, k -> new ConcurrentHashMap<>()).putIfAbsent(v, now);
        boolean first = since == null;
        long refusedFor = first ? 0 : now - since;
        Long until = leasedUntil.getOrDefault(l, Map.of()).get(v);
        if (until != null) {
            if (now - until < 0) {
                if (first) {
                    log.info("memserver {}: volume {} is still leased to a connection it has not seen end ({}); this "
                            + "bridge's previous connection, most likely; trying again", l.label(), v.name(),
                            r.getMessage());
                }
                throw new LeaseWait("volume " + v.name() + " is still leased to this bridge's previous connection, "
                        + "most likely (" + r.getMessage() + "); trying again");
            }
            fence(v, "memserver " + l.label() + " refused this bridge's lease when it reconnected (" + r.getMessage()
                    + ") after its own lease there had lapsed: another client holds the volume");
            return;
        }
        long window = config.leaseTtl().toNanos() + LEASE_CLOCK_SLACK_NANOS;
        if (refusedFor < window) {
            if (first) {
                log.info("memserver {}: volume {} is leased there to another connection ({}). This bridge never "
                        + "held it there since it started: it may be this bridge's previous process's lease, which a "
                        + "memserver keeps until its ttl runs out when it did not see that process go. Trying again "
                        + "for up to {} ms before concluding that another bridge owns the volume", l.label(), v.name(),
                        r.getMessage(), TimeUnit.NANOSECONDS.toMillis(window));
            }
            throw new LeaseWait("volume " + v.name() + " is leased to another connection (" + r.getMessage()
                    + "), maybe this bridge's previous process; trying again for "
                    + TimeUnit.NANOSECONDS.toMillis(window - refusedFor) + " ms more");
        }
        fence(v, "memserver " + l.label() + " has refused this bridge the volume's lease for "
                + TimeUnit.NANOSECONDS.toMillis(refusedFor) + " ms (" + r.getMessage() + "), longer than a lease of "
                + "this bridge's previous process could last: another client holds the volume");
    }

    /**
     * Stops serving {@code v} (see the class comment): logged once, as an error an operator must act on, and its
     * leases on every memserver are given back.
     */
    void fence(Volume v, String why) {
        if (!v.fence(why)) {
            return;
        }
        log.error("volume {}: {}. This bridge stops serving it: every request on it fails with EIO from now on, "
                + "rather than writing on to the replicas it still reaches, and it gives its leases on it back. Find "
                + "out which bridge should serve volume {}, and restart this one once the other is gone.", v.name(),
                why, v.name());
        for (var held : holdings.entrySet()) {
            MemserverLink l = held.getKey();
            RemoteConnection c = held.getValue().connection();
            if (held.getValue().volumes().contains(v) && c.isOpen()) {
                c.unlease(v.name(), config.owner(), leaseId(l, c, v)).whenComplete((x, e) -> {
                    if (e != null) {
                        log.debug("memserver {}: could not give back the lease on {}: {}", l.label(), v.name(),
                                Failures.reason(e));
                    }
                });
            }
        }
    }

    /** At close: gives back, on {@code c}, the lease of every volume not fenced (a fenced one's went back then). */
    void giveBack(MemserverLink l, RemoteConnection c) {
        for (Volume v : volumes) {
            if (v.fenced() != null) {
                continue;
            }
            try {
                c.unlease(v.name(), config.owner(), leaseId(l, c, v)).get(1, TimeUnit.SECONDS);
            } catch (ExecutionException | TimeoutException e) {
                log.debug("memserver {}: could not give back the lease on {}: {}", l.label(), v.name(),
                        Failures.reason(e));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
