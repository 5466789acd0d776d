package dev.rbridge.memserver;

import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The lease table's rules on their own, on a clock the test moves: grants, renewals, takeovers and the key rotations
 * they ask for, what non-holders are refused, giving back, a connection that ends, the limits, and what an operator
 * sees. (The whole of it over every transport is ProviderContractTest's.)
 */
class LeasesTest {
    /** A connection, as the table sees one. */
    static final class Client implements Leases.Holder {
        final long id;
        boolean ended;

        Client(long id) {
            this.id = id;
        }

        public long id() {
            return id;
        }

        public String name() {
            return "bridge-" + id;
        }

        public String peer() {
            return "10.0.0." + id + ":7000";
        }

        public boolean ended() {
            return ended;
        }
    }

    long now = 1_000_000_000L;
    final Leases leases = new Leases(() -> now);
    final List<String> rotated = new ArrayList<>();
    final Client a = new Client(1);
    final Client b = new Client(2);

    Lease grant(Client c, String volume, String owner, long ttlMillis) throws RemoteMemoryException {
        return leases.grant(c, volume, owner, ttlMillis, v -> {
            rotated.add(v);
            return 3;
        }, Set::of);
    }

    void advanceMillis(long millis) {
        now += TimeUnit.MILLISECONDS.toNanos(millis);
    }

    static Status refusal(ThrowingRunnable r) {
        return assertThrows(RemoteMemoryException.class, r::run).status();
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    @Test
    void aGrantRotatesTheKeysAndARenewalByTheHolderDoesNot() throws Exception {
        assertEquals(new Lease("vol", "owner-a", 5000, false, 0), grant(a, "vol", "owner-a", 5000));
        assertEquals(List.of("vol"), rotated, "a first grant fences whoever opened the volume unleased");
        assertEquals(new Lease("vol", "owner-a", 7000, false, 0), grant(a, "vol", "owner-a", 7000));
        assertEquals(List.of("vol"), rotated, "a renewal rotates nothing");
        assertTrue(leases.holds(a, "vol"));
        assertFalse(leases.holds(b, "vol"));
    }

    @Test
    void anotherConnectionIsRefusedWithoutLearningWhoHoldsIt() throws Exception {
        grant(a, "vol", "owner-a", 5000);
        advanceMillis(1000);
        RemoteMemoryException held = assertThrows(RemoteMemoryException.class,
                () -> grant(b, "vol", "owner-a", 5000)); // even presenting the holder's owner string
        assertEquals(Status.LEASE_HELD, held.status());
        assertTrue(held.getMessage().contains("4000 ms left"), held.getMessage());
        assertFalse(held.getMessage().contains("owner-a") || held.getMessage().contains("bridge-1")
                || held.getMessage().contains("10.0.0.1"), held.getMessage());
        RemoteMemoryException denied = assertThrows(RemoteMemoryException.class,
                () -> leases.check(b, "vol", "open its regions"));
        assertEquals(Status.ACCESS_DENIED, denied.status());
        assertTrue(denied.getMessage().contains("only its holder may open its regions"), denied.getMessage());
        assertDoesNotThrow(() -> leases.check(a, "vol", "open its regions"));
        assertDoesNotThrow(() -> leases.check(b, "other-vol", "open its regions"), "unleased volumes are open");
        leases.giveBack(b, "vol", "owner-a"); // not the holder's connection: changes nothing
        assertTrue(leases.holds(a, "vol"));
    }

    @Test
    void anExpiredLeaseIsTakenOverAndRotatesTheKeys() throws Exception {
        grant(a, "vol", "owner-a", 300);
        advanceMillis(301);
        assertDoesNotThrow(() -> leases.check(b, "vol", "open its regions"), "an expired lease binds nobody");
        rotated.clear();
        assertEquals(new Lease("vol", "owner-b", 30_000, true, 1), grant(b, "vol", "owner-b", 30_000));
        assertEquals(List.of("vol"), rotated);
        assertEquals(Status.LEASE_HELD, refusal(() -> grant(a, "vol", "owner-a", 300)), "the old holder is fenced");
        assertFalse(leases.holds(a, "vol"));
    }

    @Test
    void aLeaseWhoseConnectionEndedIsFreeAtOnceAndItsTakeoverIsOne() throws Exception {
        grant(a, "vol", "owner-a", 300_000);
        a.ended = true;
        leases.ended(a);
        Lease again = grant(b, "vol", "owner-a", 30_000);
        assertTrue(again.tookOver(), "the same owner string on another connection");
        assertEquals(0, again.ownerChanges(), "the owner before was the same");
    }

    @Test
    void aLeaseGivenBackPassesOnWithoutATakeoverButTheKeysStillRotate() throws Exception {
        grant(a, "vol", "owner-a", 30_000);
        leases.giveBack(a, "vol", "someone-else"); // the owner string must match too
        assertTrue(leases.holds(a, "vol"));
        leases.giveBack(a, "vol", "owner-a");
        assertFalse(leases.holds(a, "vol"));
        rotated.clear();
        Lease next = grant(b, "vol", "owner-b", 30_000);
        assertFalse(next.tookOver());
        assertEquals(1, next.ownerChanges(), "owner-a had the volume before, even if it gave it back");
        assertEquals(List.of("vol"), rotated);
        assertEquals(1, grant(b, "vol", "owner-b", 30_000).ownerChanges(), "a renewal changes no owner");
        leases.giveBack(b, "vol", "owner-b");
        assertEquals(2, grant(a, "vol", "owner-a", 30_000).ownerChanges(), "back to owner-a: another change");
        b.ended = true;
        leases.ended(b);
        assertEquals(2, grant(a, "vol", "owner-a", 30_000).ownerChanges(), "a renewal, with b gone");
    }

    @Test
    void ttlsOwnersAndVolumesOutOfBoundsAreBadRequests() {
        assertEquals(Status.BAD_REQUEST, refusal(() -> grant(a, "vol", "owner-a", 0)));
        assertEquals(Status.BAD_REQUEST, refusal(() -> grant(a, "vol", "owner-a", -1)));
        assertEquals(Status.BAD_REQUEST, refusal(() -> grant(a, "vol", "owner-a", Lease.MAX_TTL.toMillis() + 1)));
        assertEquals(Status.BAD_REQUEST, refusal(() -> grant(a, "vol", "", 1000)));
        assertEquals(Status.BAD_REQUEST, refusal(() -> grant(a, "vol", "o".repeat(Leases.MAX_OWNER + 1), 1000)));
        assertEquals(Status.BAD_REQUEST, refusal(() -> grant(a, "v".repeat(256), "owner-a", 1000)));
        assertEquals(0, leases.size(), "refusals leave no entry");
    }

    @Test
    void aConnectionHoldsAtMostItsLimitAndGivingOneBackMakesRoom() throws Exception {
        for (int i = 0; i < Leases.MAX_LEASES_PER_CLIENT; i++) {
            grant(a, "vol-" + i, "owner-a", 30_000);
        }
        assertEquals(Status.NO_CAPACITY, refusal(() -> grant(a, "one-more", "owner-a", 30_000)));
        grant(a, "vol-0", "owner-a", 30_000); // renewing one it holds is no new lease
        leases.giveBack(a, "vol-1", "owner-a");
        grant(a, "one-more", "owner-a", 30_000);
        grant(b, "b-vol", "owner-b", 30_000); // the limit is per connection
    }

    @Test
    void whatAnOperatorSeesNamesTheHolderAndTheState() throws Exception {
        grant(a, "held", "owner-a", 10_000);
        grant(a, "expired", "owner-a", 100);
        grant(a, "given", "owner-a", 10_000);
        leases.giveBack(a, "given", "owner-a");
        grant(b, "released", "owner-b", 10_000);
        b.ended = true;
        leases.ended(b);
        advanceMillis(200);
        List<MemServer.LeaseView> views = leases.views();
        assertEquals(List.of("expired", "given", "held", "released"), views.stream().map(MemServer.LeaseView::volume)
                .toList(), "by volume");
        assertEquals(List.of("expired", "given back", "held", "released"), views.stream()
                .map(MemServer.LeaseView::state).toList());
        MemServer.LeaseView held = views.get(2);
        assertEquals(new MemServer.LeaseView("held", "owner-a", 1, "bridge-1", "10.0.0.1:7000", "held", 10_000,
                9800), held);
    }
}
