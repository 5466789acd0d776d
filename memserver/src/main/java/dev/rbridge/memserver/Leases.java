package dev.rbridge.memserver;

import dev.rbridge.common.Printable;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;
import java.util.function.Supplier;
import java.util.function.ToIntFunction;

/**
 * A memserver's volume leases: who may use a volume's regions, by the rules of {@code rdma/README.md} ("Volume leases
 * and fencing"). A lease belongs to the connection that took it ({@link Holder}), not to the owner string it presented:
 * owner strings are labels, not secrets. The same connection renews a live lease; any other connection takes it over
 * once it expired or its holder's connection ended, whatever owner string it presents; only the holder's connection
 * gives it back. Refusals say how long a lease has left, never who holds it.
 *
 * <p>Every grant but a renewal by the holder's connection (of a live lease, or of a lapsed one that no other connection
 * touched meanwhile) opens a new <em>epoch</em> of the volume
 * (numbers increasing on this memserver) and rotates its keys, so that every key belongs to one epoch; the memserver
 * answers such a grant only once every access under an older epoch has ended ({@code Memserver#lease}). Each grant
 * carries a secret lease id, returned only to the grantee: presented again (on any connection) it continues the lease
 * ({@link Lease#continued}) as long as nobody else was granted the volume, nor touched its regions, in between.
 *
 * <p>Not thread-safe: the memserver calls it under the lock that also guards the region-table change each check is
 * for, so a key rotation never interleaves with an open that hands out a key or an allocate that adds a region.
 *
 * <p>Bounded: at most {@value #MAX_LEASES} entries ({@link #MAX_LEASES_PER_CLIENT} per connection), ttls up to
 * {@link Lease#MAX_TTL}, owners of {@value #MAX_OWNER} bytes.
 */
final class Leases {
    private static final Logger log = LoggerFactory.getLogger(Leases.class);

    static final int MAX_OWNER = 1024;
    /**
     * Entries in the table, held or not. Entries that bind nobody are kept (a takeover after them must fence) only while
     * their volume has regions, and swept when the table is full; this bounds what the rest can take.
     */
    static final int MAX_LEASES = 65536;
    /** Leases one connection holds at once: a bridge holds one per volume it serves. */
    static final int MAX_LEASES_PER_CLIENT = 256;

    /** A client connection, which may hold leases. */
    interface Holder {
        long id();

        String name();

        String peer();

        /** Its connection ended: its leases bind nobody. */
        boolean ended();
    }

    /**
     * Where a lease stands: {@code HELD} by its holder's connection (live while renewed within its ttl), {@code
     * RELEASED} because that connection ended, {@code GIVEN_BACK} with UNLEASE. Only a held, unexpired lease binds
     * anyone; the others are kept so that the next grant knows whether it takes over from someone.
     */
    private enum State {
        HELD, RELEASED, GIVEN_BACK
    }

    /**
     * {@code ownerChanges}: how many grants of this volume went to another owner string than the entry before;
     * {@code epoch} and {@code leaseId}: this grant's; {@code touched}: a client other than the holder used the
     * volume's regions while the lease bound nobody, so the next grant continues no lease.
     */
    private record Entry(String owner, Holder holder, long ttlMillis, long expiresAtNanos, State state,
            long ownerChanges, long epoch, long leaseId, boolean touched) {
        boolean live(long now) {
            return state == State.HELD && !holder.ended() && expiresAtNanos - now > 0;
        }

        long remainingMillis(long now) {
            return live(now) ? Math.max(0, TimeUnit.NANOSECONDS.toMillis(expiresAtNanos - now)) : 0;
        }

        Entry in(State s) {
            return new Entry(owner, holder, ttlMillis, expiresAtNanos, s, ownerChanges, epoch, leaseId, touched);
        }

        /** The lease id is a secret: never printed. */
        @Override
        public String toString() {
            return "Entry[owner=" + owner + ", holder=" + holder.id() + ", state=" + state + ", epoch=" + epoch
                    + ", touched=" + touched + "]";
        }

        Entry touchedByAnother() {
            return new Entry(owner, holder, ttlMillis, expiresAtNanos, state, ownerChanges, epoch, leaseId, true);
        }
    }

    /** A grant: {@code renewal} when it kept the epoch (a live lease renewed by its holder's connection). */
    record Grant(Lease lease, boolean renewal) {
    }

    /** By volume name. An entry outlives its holder, so a takeover knows to fence. */
    private final Map<String, Entry> table = new HashMap<>();
    /** Leases each connection holds, or held until they expired with nobody taking them since. */
    private final Map<Holder, Integer> held = new IdentityHashMap<>();
    private final LongSupplier clock;
    /** Lease ids: secrets, so from a strong source. */
    private final LongSupplier ids;
    /** The last epoch granted, over all volumes (so every volume's epochs increase). */
    private long epoch = Lease.NO_EPOCH;

    Leases() {
        this(System::nanoTime);
    }

    /** {@code clock}: nanoseconds, as {@link System#nanoTime()}. */
    Leases(LongSupplier clock) {
        this(clock, new java.security.SecureRandom()::nextLong);
    }

    Leases(LongSupplier clock, LongSupplier ids) {
        this.clock = clock;
        this.ids = ids;
    }

    /**
     * Refuses {@code c} ({@code ACCESS_DENIED}) when another connection holds a live lease on {@code volume}, saying
     * how long it has left but not who holds it; {@code what} is what only the holder may do.
     */
    void check(Holder c, String volume, String what) throws RemoteMemoryException {
        Entry l = table.get(volume);
        if (l != null && l.holder() != c) {
            long now = clock.getAsLong();
            if (l.live(now)) {
                throw new RemoteMemoryException(Status.ACCESS_DENIED, "volume '" + volume + "' is leased by another "
                        + "client (" + l.remainingMillis(now) + " ms left); only its holder may " + what);
            }
            if (!l.touched()) {
                table.put(volume, l.touchedByAnother()); // whoever continues the lease must know
            }
        }
    }

    /** Whether {@code c} holds {@code volume}'s lease: the regions it allocates are then the volume's data. */
    boolean holds(Holder c, String volume) {
        Entry l = table.get(volume);
        return l != null && l.holder() == c && l.state() == State.HELD;
    }

    /**
     * Grants {@code c} the lease of {@code volume}, or refuses it: {@code LEASE_HELD} while another connection holds a
     * live one, {@code BAD_REQUEST} for a ttl, owner or volume out of bounds or a lease id that is not the lease's own,
     * {@code NO_CAPACITY} at a limit. Every grant but a renewal by the holder's own connection (of a live lease, or of a
     * lapsed one nobody else touched) opens a new epoch and rotates the keys of the volume's regions ({@code rotateKeys}, which returns how many); it is a
     * takeover when it ends a lease someone held and did not give back, and it continues the lease whose id {@code
     * presentedId} is when that is the volume's last grant and nobody touched the volume since. It counts the grants
     * that went to another owner string than the entry before, in whatever state ({@link Lease#ownerChanges}).
     * {@code volumesWithRegions} is asked only when the table is full.
     */
    Grant grant(Holder c, String volume, String owner, long ttlMillis, long presentedId,
            ToIntFunction<String> rotateKeys, Supplier<Set<String>> volumesWithRegions)
            throws RemoteMemoryException {
        checkBounds(volume, owner, ttlMillis);
        long now = clock.getAsLong();
        Entry previous = table.get(volume);
        if (previous != null && previous.holder() != c && previous.live(now)) {
            throw new RemoteMemoryException(Status.LEASE_HELD, "volume '" + volume + "' is leased by another "
                    + "client (" + previous.remainingMillis(now) + " ms left)");
        }
        // The lease is the connection's: the same connection renews a live lease, whatever owner string it presents,
        // and one that lapsed if no other connection touched the volume meanwhile (then nobody else can hold a key of
        // this epoch: keys are handed out only through check). Anything else (another connection, or this one after
        // someone else used the volume in its lapse) is a new grant in a new epoch.
        boolean renewal = previous != null && previous.holder() == c && previous.state() == State.HELD
                && (previous.live(now) || !previous.touched());
        if (renewal && presentedId != Lease.NO_ID && presentedId != previous.leaseId()) {
            throw new RemoteMemoryException(Status.BAD_REQUEST, "that is not the id of this connection's lease on "
                    + "volume '" + volume + "'");
        }
        if (!heldBy(previous, c)) {
            makeRoom(c, previous == null, now, volumesWithRegions);
        }
        long ownerChanges = previous == null ? 0
                : previous.ownerChanges() + (previous.owner().equals(owner) ? 0 : 1);
        long expires = now + TimeUnit.MILLISECONDS.toNanos(ttlMillis);
        if (renewal) {
            table.put(volume, new Entry(owner, c, ttlMillis, expires, State.HELD, ownerChanges, previous.epoch(),
                    previous.leaseId(), false));
            return new Grant(new Lease(volume, owner, ttlMillis, false, ownerChanges, previous.epoch(),
                    previous.leaseId(), presentedId != Lease.NO_ID), true); // continued: the id presented, if any
        }
        boolean continued = previous != null && presentedId != Lease.NO_ID && presentedId == previous.leaseId()
                && !previous.touched();
        long leaseId = continued ? previous.leaseId() : newLeaseId();
        Entry granted = new Entry(owner, c, ttlMillis, expires, State.HELD, ownerChanges, ++epoch, leaseId, false);
        install(volume, granted, previous);
        int rotated = rotateKeys.applyAsInt(volume);
        logNewEpoch(volume, granted, previous, now, rotated);
        return new Grant(new Lease(volume, owner, ttlMillis, tookOver(granted, previous), ownerChanges,
                granted.epoch(), leaseId, continued), false);
    }

    /** Refuses ({@code BAD_REQUEST}) a ttl, owner or volume name out of bounds. */
    private static void checkBounds(String volume, String owner, long ttlMillis) throws RemoteMemoryException {
        if (ttlMillis <= 0 || ttlMillis > Lease.MAX_TTL.toMillis()) {
            throw new RemoteMemoryException(Status.BAD_REQUEST, "a lease's ttl must be from 1 to "
                    + Lease.MAX_TTL.toMillis() + " ms (5 min), not " + ttlMillis + " ms: renew a lease instead");
        }
        if (owner == null || owner.isEmpty() || owner.getBytes(StandardCharsets.UTF_8).length > MAX_OWNER) {
            throw new RemoteMemoryException(Status.BAD_REQUEST, "a lease's owner must be 1 to " + MAX_OWNER
                    + " bytes long");
        }
        if (volume == null || volume.getBytes(StandardCharsets.UTF_8).length > RegionTag.MAX_VOLUME_NAME) {
            throw new RemoteMemoryException(Status.BAD_REQUEST, "a volume name is at most "
                    + RegionTag.MAX_VOLUME_NAME + " bytes long");
        }
    }

    /**
     * A grant in a new epoch ends the lease it follows: {@code granted} replaces it in the table, counts among its
     * holder's leases unless it was a lapsed lease of the same connection, and no longer among those of the previous
     * holder, if another connection's lease was still held.
     */
    private void install(String volume, Entry granted, Entry previous) {
        Holder c = granted.holder();
        table.put(volume, granted);
        if (!heldBy(previous, c)) {
            held.merge(c, 1, Integer::sum);
        }
        if (previous != null && previous.holder() != c && previous.state() == State.HELD) {
            held.computeIfPresent(previous.holder(), (h, n) -> n > 1 ? n - 1 : null);
        }
    }

    /** Whether {@code l} is a lease {@code c}'s connection holds, live or lapsed. */
    private static boolean heldBy(Entry l, Holder c) {
        return l != null && l.holder() == c && l.state() == State.HELD;
    }

    /** A takeover: the grant ends a lease another connection held and did not give back. */
    private static boolean tookOver(Entry granted, Entry previous) {
        return previous != null && previous.holder() != granted.holder() && previous.state() != State.GIVEN_BACK;
    }

    /** Logs a grant in a new epoch: a takeover, from whom and why it was possible; else the grant. */
    private void logNewEpoch(String volume, Entry granted, Entry previous, long now, int rotated) {
        Holder c = granted.holder();
        String v = Printable.cut(volume, RegionTag.MAX_VOLUME_NAME);
        if (tookOver(granted, previous)) {
            Holder from = previous.holder();
            log.info("volume '{}': lease taken by '{}' (client {} at {}) from '{}' (client {} at {}, {}); epoch {}, {} "
                    + "region key(s) rotated", v, Printable.cut(granted.owner(), MAX_OWNER), c.id(), c.peer(),
                    Printable.cut(previous.owner(), MAX_OWNER), from.id(), from.peer(),
                    previous.state() == State.RELEASED || from.ended() ? "connection ended"
                            : "lease expired "
                                    + TimeUnit.NANOSECONDS.toMillis(now - previous.expiresAtNanos()) + " ms ago",
                    granted.epoch(), rotated);
        } else {
            log.info("volume '{}': leased to '{}' (client {} at {}) for {} ms, epoch {}{}{}", v,
                    Printable.cut(granted.owner(), MAX_OWNER), c.id(), c.peer(), granted.ttlMillis(), granted.epoch(),
                    heldBy(previous, c) ? " (its lease had lapsed: a new grant)" : "",
                    rotated == 0 ? "" : "; " + rotated + " region key(s) rotated");
        }
    }

    private long newLeaseId() {
        long id;
        do {
            id = ids.getAsLong();
        } while (id == Lease.NO_ID);
        return id;
    }

    /**
     * The grant of {@code epoch} to {@code c} could not be completed (accesses under an older epoch did not end in
     * time): it binds nobody, and the next grant opens a new epoch and drains again (so it is answered only once those
     * accesses have ended). Nobody else touched the volume for it: a retry presenting the id still continues it.
     */
    void abandon(Holder c, String volume, long epoch) {
        Entry l = table.get(volume);
        if (l != null && l.holder() == c && l.epoch() == epoch && l.state() == State.HELD) {
            table.put(volume, l.in(State.RELEASED));
            held.computeIfPresent(c, (h, n) -> n > 1 ? n - 1 : null);
        }
    }

    /**
     * Refuses a new lease for {@code c} when it holds its limit, or when the table is full even after dropping the
     * entries that bind nobody and guard no regions.
     */
    private void makeRoom(Holder c, boolean newEntry, long now, Supplier<Set<String>> volumesWithRegions)
            throws RemoteMemoryException {
        if (held.getOrDefault(c, 0) >= MAX_LEASES_PER_CLIENT) {
            throw new RemoteMemoryException(Status.NO_CAPACITY, "this connection holds its limit of "
                    + MAX_LEASES_PER_CLIENT + " leases; give some back first");
        }
        if (newEntry && table.size() >= MAX_LEASES) {
            Set<String> guarded = volumesWithRegions.get();
            table.entrySet().removeIf(e -> !e.getValue().live(now) && e.getValue().state() != State.HELD
                    && !guarded.contains(e.getKey()));
            if (table.size() >= MAX_LEASES) {
                throw new RemoteMemoryException(Status.NO_CAPACITY, "this memserver tracks its limit of "
                        + MAX_LEASES + " volume leases");
            }
        }
    }

    /**
     * Only the holder's own connection gives a lease back, presenting its lease id (or, from clients that predate lease
     * ids, its owner string); anyone else, or another id, changes nothing.
     */
    void giveBack(Holder c, String volume, String owner, long leaseId) {
        Entry l = table.get(volume);
        if (l != null && l.holder() == c && l.state() == State.HELD
                && (leaseId == Lease.NO_ID ? l.owner().equals(owner) : leaseId == l.leaseId())) {
            table.put(volume, l.in(State.GIVEN_BACK));
            held.computeIfPresent(c, (h, n) -> n > 1 ? n - 1 : null);
            log.info("volume '{}': lease of '{}' given back by client {} at {}",
                    Printable.cut(volume, RegionTag.MAX_VOLUME_NAME), Printable.cut(owner, MAX_OWNER),
                    c.id(), c.peer());
        }
    }

    /** {@code c}'s connection ended: the leases it held bind nobody from now on (another may take them at once). */
    void ended(Holder c) {
        for (Map.Entry<String, Entry> e : table.entrySet()) {
            Entry l = e.getValue();
            if (l.holder() == c && l.state() == State.HELD) {
                e.setValue(l.in(State.RELEASED));
                log.info("volume '{}': lease of '{}' released: client {} at {} disconnected",
                        Printable.cut(e.getKey(), RegionTag.MAX_VOLUME_NAME),
                        Printable.cut(l.owner(), MAX_OWNER), c.id(), c.peer());
            }
        }
        held.remove(c);
    }

    /** Every lease as an operator sees it, by volume. */
    List<LeaseView> views() {
        long now = clock.getAsLong();
        List<LeaseView> out = new ArrayList<>();
        table.forEach((volume, l) -> out.add(new LeaseView(volume, l.owner(), l.holder().id(),
                l.holder().name(), l.holder().peer(), l.live(now) ? "held"
                        : l.state() == State.GIVEN_BACK
                                ? "given back"
                                : l.state() == State.RELEASED || l.holder().ended() ? "released" : "expired",
                l.ttlMillis(), l.remainingMillis(now))));
        out.sort(Comparator.comparing(LeaseView::volume));
        return out;
    }

    /** Entries in the table, held or not. */
    int size() {
        return table.size();
    }
}
