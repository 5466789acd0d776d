package dev.rbridge.rdma;

import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ConnectionGateTest {
    static InetAddress host(int last) throws Exception {
        return InetAddress.getByAddress(new byte[]{10, 0, 0, (byte) last});
    }

    static ConnectionGate.Slot admitted(ConnectionGate g, InetAddress peer) {
        return assertInstanceOf(ConnectionGate.Admitted.class, g.admit(peer, () -> { })).slot();
    }

    static String refused(ConnectionGate g, InetAddress peer) {
        return assertInstanceOf(ConnectionGate.Refused.class, g.admit(peer, () -> { })).reason();
    }

    @Test
    void anAddressGetsItsShareOfUnauthenticatedAndOfAllConnections() throws Exception {
        ConnectionGate g = new ConnectionGate(new ConnectionLimits(10, 4, 10, 2));
        ConnectionGate.Slot a = admitted(g, host(1));
        ConnectionGate.Slot b = admitted(g, host(1));
        assertEquals(ConnectionGate.UNAUTHENTICATED_PEER_LIMIT, refused(g, host(1)));
        assertTrue(a.authenticated());
        assertTrue(b.authenticated());
        ConnectionGate.Slot c = admitted(g, host(1));
        admitted(g, host(1));
        assertEquals(ConnectionGate.PEER_LIMIT, refused(g, host(1)), "four from one address, authenticated or not");
        admitted(g, host(2)); // other addresses are not affected
        assertTrue(c.authenticated());
        a.close();
        a.close(); // idempotent
        admitted(g, host(1));
        assertEquals(5, g.connections());
    }

    @Test
    void aNewcomerTakesThePlaceOfTheOldestUnauthenticatedConnectionOfTheBiggestHolder() throws Exception {
        ConnectionGate g = new ConnectionGate(new ConnectionLimits(100, 50, 4, 3));
        AtomicInteger cut = new AtomicInteger();
        List<ConnectionGate.Slot> flood = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            int n = i;
            flood.add(assertInstanceOf(ConnectionGate.Admitted.class,
                    g.admit(host(1), () -> cut.set(n))).slot());
        }
        admitted(g, host(2));
        assertEquals(4, g.unauthenticated());
        ConnectionGate.Admitted honest = assertInstanceOf(ConnectionGate.Admitted.class, g.admit(host(3), () -> { }));
        assertEquals(List.of(flood.getFirst()), honest.evicted(), "host 1 holds the most: its oldest goes");
        honest.evicted().getFirst().cut();
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
        ConnectionGate.Admitted d = assertInstanceOf(ConnectionGate.Admitted.class, g.admit(host(3), () -> { }));
        assertEquals(List.of(c), d.evicted());
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
