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
import static org.junit.jupiter.api.Assertions.assertNotEquals;
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
        return grant(c, volume, owner, ttlMillis, Lease.NO_ID).lease();
    }

    Leases.Grant grant(Client c, String volume, String owner, long ttlMillis, long leaseId)
            throws RemoteMemoryException {
        return leases.grant(c, volume, owner, ttlMillis, leaseId, v -> {
            rotated.add(v);
            return 3;
        }, Set::of);
    }

    static void assertGrant(Lease l, long ttlMillis, boolean tookOver, long ownerChanges) {
        assertEquals(ttlMillis, l.ttlMillis());
        assertEquals(tookOver, l.tookOver(), "took over");
        assertEquals(ownerChanges, l.ownerChanges(), "owner changes");
        assertTrue(l.hasEpoch(), "every grant has an epoch");
        assertNotEquals(Lease.NO_ID, l.leaseId(), "and a lease id");
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
        Lease first = grant(a, "vol", "owner-a", 5000);
        assertGrant(first, 5000, false, 0);
        assertEquals(List.of("vol"), rotated, "a first grant fences whoever opened the volume unleased");
        Lease renewed = grant(a, "vol", "owner-a", 7000);
        assertGrant(renewed, 7000, false, 0);
        assertEquals(first.epoch(), renewed.epoch(), "a renewal keeps the epoch");
        assertEquals(first.leaseId(), renewed.leaseId());
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
        leases.giveBack(b, "vol", "owner-a", Lease.NO_ID); // not the holder's connection: changes nothing
        assertTrue(leases.holds(a, "vol"));
    }

    @Test
    void anExpiredLeaseIsTakenOverAndRotatesTheKeys() throws Exception {
        grant(a, "vol", "owner-a", 300);
        advanceMillis(301);
        assertDoesNotThrow(() -> leases.check(b, "vol", "open its regions"), "an expired lease binds nobody");
        rotated.clear();
        assertGrant(grant(b, "vol", "owner-b", 30_000), 30_000, true, 1);
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
        leases.giveBack(a, "vol", "someone-else", Lease.NO_ID); // the owner string must match too
        assertTrue(leases.holds(a, "vol"));
        leases.giveBack(a, "vol", "owner-a", Lease.NO_ID);
        assertFalse(leases.holds(a, "vol"));
        rotated.clear();
        Lease next = grant(b, "vol", "owner-b", 30_000);
        assertFalse(next.tookOver());
        assertEquals(1, next.ownerChanges(), "owner-a had the volume before, even if it gave it back");
        assertEquals(List.of("vol"), rotated);
        assertEquals(1, grant(b, "vol", "owner-b", 30_000).ownerChanges(), "a renewal changes no owner");
        leases.giveBack(b, "vol", "owner-b", Lease.NO_ID);
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
        leases.giveBack(a, "vol-1", "owner-a", Lease.NO_ID);
        grant(a, "one-more", "owner-a", 30_000);
        grant(b, "b-vol", "owner-b", 30_000); // the limit is per connection
    }

    @Test
    void whatAnOperatorSeesNamesTheHolderAndTheState() throws Exception {
        grant(a, "held", "owner-a", 10_000);
        grant(a, "expired", "owner-a", 100);
        grant(a, "given", "owner-a", 10_000);
        leases.giveBack(a, "given", "owner-a", Lease.NO_ID);
        grant(b, "released", "owner-b", 10_000);
        b.ended = true;
        leases.ended(b);
        advanceMillis(200);
        List<LeaseView> views = leases.views();
        assertEquals(List.of("expired", "given", "held", "released"), views.stream().map(LeaseView::volume)
                .toList(), "by volume");
        assertEquals(List.of("expired", "given back", "held", "released"), views.stream()
                .map(LeaseView::state).toList());
        LeaseView held = views.get(2);
        assertEquals(new LeaseView("held", "owner-a", 1, "bridge-1", "10.0.0.1:7000", "held", 10_000,
                9800), held);
    }

    @Test
    void aRenewalAfterALapseIsANewGrantInANewEpochWithNewKeys() throws Exception {
        Lease first = grant(a, "vol", "owner-a", 300);
        advanceMillis(301);
        leases.check(b, "vol", "open its regions"); // an intruder opens a region while the lease binds nobody
        rotated.clear();
        Leases.Grant again = grant(a, "vol", "owner-a", 300, first.leaseId());
        assertFalse(again.renewal(), "the lease had lapsed: the intruder's key must stop working");
        assertTrue(again.lease().epoch() > first.epoch(), "a new epoch");
        assertEquals(List.of("vol"), rotated, "new keys");
        assertEquals(Boolean.FALSE, again.lease().continued(), "someone touched the volume meanwhile");
        assertNotEquals(first.leaseId(), again.lease().leaseId());
    }

    @Test
    void aLapseNobodyUsedIsRenewedInItsEpochWithItsKeys() throws Exception {
        Lease first = grant(a, "vol", "owner-a", 300);
        advanceMillis(301);
        rotated.clear();
        Leases.Grant again = grant(a, "vol", "owner-a", 300, first.leaseId());
        assertTrue(again.renewal(), "no other connection can hold a key of this epoch");
        assertEquals(List.of(), rotated);
        assertEquals(first.epoch(), again.lease().epoch());
        assertEquals(Boolean.TRUE, again.lease().continued());
    }

    @Test
    void aLapseAnotherConnectionOnlyTriedToUseIsStillTouched() throws Exception {
        grant(a, "vol", "owner-a", 300);
        leases.check(a, "vol", "open its regions"); // the holder itself touches nothing
        assertThrows(RemoteMemoryException.class, () -> leases.check(b, "vol", "open its regions"));
        advanceMillis(301);
        leases.check(b, "vol", "open its regions");
        assertFalse(grant(a, "vol", "owner-a", 300, Lease.NO_ID).renewal());
    }

    @Test
    void theLeaseIdNotTheOwnerStringTellsAReconnectWhetherAnotherHadTheVolume() throws Exception {
        Lease first = grant(a, "vol", "bridge-owner", 30_000);
        a.ended = true;
        leases.ended(a);
        // An intruder takes the lease under the bridge's own (public) owner string and gives it back.
        Lease intruder = grant(b, "vol", "bridge-owner", 30_000);
        assertEquals(first.ownerChanges(), intruder.ownerChanges(), "the owner-string count cannot see it");
        leases.giveBack(b, "vol", "bridge-owner", intruder.leaseId());
        Client reconnected = new Client(3);
        Lease back = grant(reconnected, "vol", "bridge-owner", 30_000, first.leaseId()).lease();
        assertEquals(Boolean.FALSE, back.continued(), "the id of the bridge's grant is not the volume's last");
        assertTrue(back.epoch() > intruder.epoch() && intruder.epoch() > first.epoch(), "epochs increase");
    }

    @Test
    void aReconnectPresentingItsLeaseIdContinuesIt() throws Exception {
        Lease first = grant(a, "vol", "owner-a", 30_000);
        a.ended = true;
        leases.ended(a);
        Client reconnected = new Client(3);
        Lease back = grant(reconnected, "vol", "owner-a", 30_000, first.leaseId()).lease();
        assertEquals(Boolean.TRUE, back.continued());
        assertTrue(back.tookOver(), "its previous connection did not give it back");
        Lease guess = grant(new Client(4), "other", "owner-a", 30_000, first.leaseId() + 1).lease();
        assertEquals(Boolean.FALSE, guess.continued(), "a guessed id continues nothing");
    }

    @Test
    void aWrongLeaseIdNeitherRenewsNorGivesBack() throws Exception {
        Lease first = grant(a, "vol", "owner-a", 30_000);
        assertEquals(Status.BAD_REQUEST, refusal(() -> grant(a, "vol", "owner-a", 30_000, first.leaseId() + 1)));
        leases.giveBack(a, "vol", "owner-a", first.leaseId() + 1);
        assertTrue(leases.holds(a, "vol"), "a wrong id gives nothing back");
        leases.giveBack(a, "vol", "owner-a", first.leaseId());
        assertFalse(leases.holds(a, "vol"));
    }

    @Test
    void anAbandonedGrantBindsNobodyAndTheNextOneDrainsAgain() throws Exception {
        Lease first = grant(a, "vol", "owner-a", 30_000);
        leases.abandon(a, "vol", first.epoch());
        assertFalse(leases.holds(a, "vol"));
        Leases.Grant again = grant(b, "vol", "owner-b", 30_000, Lease.NO_ID);
        assertFalse(again.renewal());
        assertTrue(again.lease().epoch() > first.epoch());
    }
}
