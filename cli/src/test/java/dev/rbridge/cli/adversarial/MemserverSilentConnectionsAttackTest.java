package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Connections that start a greeting and never finish it, kept up for longer than the hello timeout: each one the
 * memserver drops is opened again. They took half a megabyte of direct memory each and a place nobody capped; now
 * they take a few kilobytes, at most 64 of them at once (8 per address), and a newcomer from another address always
 * finds a place.
 */
@Timeout(300)
class MemserverSilentConnectionsAttackTest extends MemserverAttackTest {
    @Test
    void connectionsThatNeverSayHelloHoldNeitherMemoryNorPlaces() throws Exception {
        try (ServeCluster c = start(cluster("silent")); WellBehavedClient w = wellBehaved(c, VOLUME)) {
            List<Raw> held = new ArrayList<>();
            try {
                long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(14); // past the 10 s hello timeout
                long nextCheck = 0;
                while (System.nanoTime() < end) {
                    held.removeIf(r -> {
                        try {
                            if (r.socket.isClosed() || r.closedByServer(1)) {
                                r.close();
                                return true;
                            }
                            return false;
                        } catch (IOException e) {
                            r.close();
                            return true;
                        }
                    });
                    for (ServeCluster.Memserver m : c.memservers()) {
                        for (int i = 0; held.size() < 600 && i < 100; i++) {
                            Raw r = Raw.connect(address(m), loopback(2 + held.size() % 75));
                            r.raw(new byte[]{0x52, 0x42, 0x52}); // the first three bytes of a header, and no more
                            held.add(r);
                        }
                    }
                    if (System.nanoTime() > nextCheck) {
                        w.assertServedWithin(SERVED_WITHIN);
                        assertDirectMemoryBounded(c);
                        for (ServeCluster.Memserver m : c.memservers()) {
                            assertNewClientServed(m);
                        }
                        nextCheck = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
                    }
                    Thread.sleep(100);
                }
            } finally {
                held.forEach(Raw::close);
            }
            assertServesAsBefore(c, w);
            for (ServeCluster.Memserver m : c.memservers()) {
                double turnedAway = refused(m, "unauthenticated_peer_limit") + refused(m, "unauthenticated_limit")
                        + refused(m, "unauthenticated_evicted") + refused(m, "hello_timeout");
                assertTrue(turnedAway > 0, "memserver " + m.address() + " counted no silent connection");
            }
        }
    }
}
