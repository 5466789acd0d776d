package dev.rbridge.rdma;

import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ConnectionGateTest {
    static InetAddress host(int last) throws Exception {
        return InetAddress.getByAddress(new byte[]{10, 0, 0, (byte) last});
    }

    static ConnectionGate.Slot admitted(ConnectionGate g, InetAddress peer) {
        return assertInstanceOf(ConnectionGate.Admitted.class, g.admit(peer, () -> {
        })).slot();
    }

    static String refused(ConnectionGate g, InetAddress peer) {
        return assertInstanceOf(ConnectionGate.Refused.class, g.admit(peer, () -> {
        })).reason();
    }

    static ConnectionGate.Eviction evicted(ConnectionGate.Admission a) {
        return assertInstanceOf(ConnectionGate.Admitted.class, a).evicted();
    }

    @Test
    void aNewcomerFromAnAddressHoldingItsShareTakesThePlaceOfThatAddresssOldest() throws Exception {
        ConnectionGate g = new ConnectionGate(new ConnectionLimits(10, 4, 10, 2));
        AtomicInteger cut = new AtomicInteger();
        ConnectionGate.Slot a = assertInstanceOf(ConnectionGate.Admitted.class, g.admit(host(1), () -> cut.set(1)))
                .slot();
        ConnectionGate.Slot b = admitted(g, host(1));
        // The address holds its two unauthenticated places: the newcomer, as an honest client's greeting would be, is
        // the newest, and the oldest gives way (refusing it let silent connections lock the address out).
        ConnectionGate.Admission third = g.admit(host(1), () -> {
        });
        ConnectionGate.Eviction e = evicted(third);
        assertSame(a, e.slot(), "the address's oldest goes");
        assertEquals(ConnectionGate.UNAUTHENTICATED_PEER_LIMIT, e.reason());
        e.slot().cut();
        assertEquals(1, cut.get());
        assertFalse(a.authenticated(), "an evicted connection cannot authenticate any more");
        assertEquals(2, g.unauthenticated());
        ConnectionGate.Slot c = ((ConnectionGate.Admitted) third).slot();
        assertTrue(b.authenticated());
        assertTrue(c.authenticated());
        ConnectionGate.Slot d = admitted(g, host(1));
        admitted(g, host(1));
        // Four from the address, two of them unauthenticated: a newcomer still takes the oldest's place.
        ConnectionGate.Eviction full = evicted(g.admit(host(1), () -> {
        }));
        assertSame(d, full.slot());
        assertEquals(ConnectionGate.UNAUTHENTICATED_PEER_LIMIT, full.reason());
        assertEquals(4, g.connections());
        admitted(g, host(2)); // other addresses are not affected
        assertEquals(5, g.connections());
    }

    /**
     * A host usually has a whole IPv6 /64: counted by address, one host would have 2^64 shares of the per-address
     * limits. Two addresses of one /64 share them, as they do on the NBD and ops HTTP listeners
     * ({@link dev.rbridge.common.PeerGroup}); IPv4 addresses and other /64s do not.
     */
    @Test
    void twoAddressesOfOneIpv6SlashSixtyFourShareTheirShare() throws Exception {
        ConnectionGate g = new ConnectionGate(new ConnectionLimits(10, 2, 10, 2));
        assertTrue(admitted(g, InetAddress.getByName("fd00:1:2:3::1")).authenticated());
        assertTrue(admitted(g, InetAddress.getByName("fd00:1:2:3:ffff:ffff:ffff:fffe")).authenticated());
        assertEquals(ConnectionGate.PEER_LIMIT, refused(g, InetAddress.getByName("fd00:1:2:3:abcd::9")),
                "a third address of the same /64");
        admitted(g, InetAddress.getByName("fd00:1:2:4::1")); // the next /64
        admitted(g, host(1));
        admitted(g, host(2));
        assertEquals(5, g.connections());
    }

    @Test
    void anAddressWhoseConnectionsAllAuthenticatedIsRefusedBeyondItsLimit() throws Exception {
        ConnectionGate g = new ConnectionGate(new ConnectionLimits(10, 2, 10, 2));
        ConnectionGate.Slot a = admitted(g, host(1));
        ConnectionGate.Slot b = admitted(g, host(1));
        assertTrue(a.authenticated());
        assertTrue(b.authenticated());
        assertEquals(ConnectionGate.PEER_LIMIT, refused(g, host(1)), "two from one address, both authenticated");
        admitted(g, host(2));
        a.close();
        a.close(); // idempotent
        assertNull(evicted(g.admit(host(1), () -> {
        })), "a place freed by a client that left is taken again");
        assertEquals(3, g.connections());
    }

    @Test
    void aNewcomerTakesThePlaceOfTheOldestUnauthenticatedConnectionOfTheBiggestHolder() throws Exception {
        ConnectionGate g = new ConnectionGate(new ConnectionLimits(100, 50, 4, 3));
        AtomicInteger cut = new AtomicInteger(-1);
        List<ConnectionGate.Slot> flood = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            int n = i;
            flood.add(assertInstanceOf(ConnectionGate.Admitted.class,
                    g.admit(host(1), () -> cut.set(n))).slot());
        }
        admitted(g, host(2));
        assertEquals(4, g.unauthenticated());
        ConnectionGate.Admitted honest = assertInstanceOf(ConnectionGate.Admitted.class, g.admit(host(3), () -> {
        }));
        assertSame(flood.getFirst(), honest.evicted().slot(), "host 1 holds the most: its oldest goes");
        assertEquals(ConnectionGate.UNAUTHENTICATED_EVICTED, honest.evicted().reason());
        honest.evicted().slot().cut();
        assertEquals(0, cut.get());
        assertFalse(flood.getFirst().authenticated(), "an evicted connection cannot authenticate any more");
        assertEquals(4, g.unauthenticated());
        assertTrue(honest.slot().authenticated());
        admitted(g, host(4));
        assertEquals(4, g.unauthenticated());
        // host 1 is the biggest holder itself: it can only crowd out its own, so it is refused
        assertEquals(ConnectionGate.UNAUTHENTICATED_LIMIT, refused(g, host(1)));
    }

    @Test
    void whenEveryPlaceIsTakenOnlyUnauthenticatedConnectionsGiveWay() throws Exception {
        ConnectionGate g = new ConnectionGate(new ConnectionLimits(3, 3, 3, 3));
        ConnectionGate.Slot a = admitted(g, host(1));
        ConnectionGate.Slot b = admitted(g, host(1));
        ConnectionGate.Slot c = admitted(g, host(2));
        a.authenticated();
        b.authenticated();
        ConnectionGate.Admitted d = assertInstanceOf(ConnectionGate.Admitted.class, g.admit(host(3), () -> {
        }));
        assertSame(c, d.evicted().slot());
        d.slot().authenticated();
        assertEquals(ConnectionGate.CONNECTION_LIMIT, refused(g, host(4)), "all three authenticated: nobody goes");
        assertEquals(3, g.connections());
        c.close(); // the evicted connection ending frees nothing more
        assertEquals(3, g.connections());
    }

    @Test
    void limitsAreCheckedAndNameTheirOptions() {
        assertThrows(IllegalArgumentException.class, () -> new ConnectionLimits(0, 1, 1, 1));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> ConnectionLimits.of(10, 20, 5));
        assertTrue(e.getMessage().contains("--max-connections-per-peer"), e.getMessage());
        ConnectionLimits small = ConnectionLimits.of(4, 2, 3);
        assertEquals(2, small.maxUnauthenticatedPerPeer(), "never more than the per-address limit");
        assertSame(ConnectionLimits.MAX_UNAUTHENTICATED_PER_PEER_DEFAULT, ConnectionLimits.DEFAULTS
                .maxUnauthenticatedPerPeer());
    }
}
