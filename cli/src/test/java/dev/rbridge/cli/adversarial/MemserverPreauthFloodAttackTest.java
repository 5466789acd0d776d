package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A flood of connections that never authenticate, against memservers whose direct memory is small enough that the
 * half megabyte each connection took before authenticating ran it out within fifty connections: the accept loop died
 * of OutOfMemoryError, no client could connect any more, and /readyz still said ready. Now a connection costs a few
 * kilobytes of heap until it presents the token, unauthenticated connections are capped (in all and per address),
 * and the accept loop survives whatever fails.
 */
@Timeout(300)
class MemserverPreauthFloodAttackTest extends MemserverAttackTest {
    @Test
    void aFloodOfUnauthenticatedConnectionsCannotStopTheMemserverTakingClients() throws Exception {
        try (ServeCluster c = start(cluster("preauth-flood").memserverJvmArgs("-XX:MaxDirectMemorySize=24m"));
                WellBehavedClient w = wellBehaved(c, VOLUME)) {
            List<Raw> held = new ArrayList<>();
            try {
                // 400 connections to each memserver from 50 addresses, held open, saying nothing.
                for (ServeCluster.Memserver m : c.memservers()) {
                    for (int i = 0; i < 400; i++) {
                        try {
                            held.add(Raw.connect(address(m), loopback(2 + i % 50)));
                        } catch (IOException e) {
                            break; // a memserver that takes no connections any more: found out below
                        }
                    }
                }
                w.assertServedWithin(SERVED_WITHIN);
                assertDirectMemoryBounded(c);
                for (ServeCluster.Memserver m : c.memservers()) {
                    assertNewClientServed(m); // while the flood holds its connections
                }
                // And connections that come and go as fast as they can.
                for (ServeCluster.Memserver m : c.memservers()) {
                    for (int i = 0; i < 1000; i++) {
                        try (Raw r = Raw.connect(address(m), loopback(60 + i % 50))) {
                            r.raw(new byte[]{0x52, 0x42});
                        }
                    }
                }
                w.assertServedWithin(SERVED_WITHIN);
                assertDirectMemoryBounded(c);
            } finally {
                held.forEach(Raw::close);
            }
            assertServesAsBefore(c, w);
            assertDirectMemoryBounded(c);
            for (ServeCluster.Memserver m : c.memservers()) {
                double turnedAway = refused(m, "unauthenticated_peer_limit") + refused(m, "unauthenticated_limit")
                        + refused(m, "unauthenticated_evicted");
                assertTrue(turnedAway >= 300, "memserver " + m.address() + " counted " + turnedAway
                        + " connections turned away for the unauthenticated limits");
            }
        }
    }
}
