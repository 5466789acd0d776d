package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A client with the token asks for a lease of a year, on a volume nobody serves and on the bridge's own. A lease is
 * how long a holder that stopped renewing (paused, cut off) keeps its volume from everyone; memservers granted up to
 * a year. Now a ttl above five minutes is refused, naming the bound.
 */
@Timeout(300)
class LeaseTtlAttackTest extends MemserverAttackTest {
    @Test
    void aLeaseLongerThanFiveMinutesIsRefused() throws Exception {
        try (ServeCluster c = start(cluster("lease-ttl")); WellBehavedClient w = wellBehaved(c, VOLUME)) {
            long year = TimeUnit.DAYS.toMillis(365);
            for (ServeCluster.Memserver m : c.memservers()) {
                try (Raw r = Raw.connect(address(m), loopback(13))) {
                    assertEquals(0, r.hello(TOKEN, "squatter").status());
                    for (long ttl : new long[]{year, Long.MAX_VALUE, 300_001}) {
                        Reply squat = r.lease("spare", "squatter", ttl);
                        assertEquals(STATUS_BAD_REQUEST, squat.status(), "a lease of " + ttl + " ms on " + m.address()
                                + " was answered " + squat.status() + " " + squat.message());
                        assertTrue(squat.message().contains("300000 ms"), squat.message());
                    }
                    Reply own = r.lease(VOLUME, "squatter", year);
                    assertEquals(STATUS_BAD_REQUEST, own.status(), own.message());
                    Reply fiveMinutes = r.lease("spare", "squatter", 300_000);
                    assertEquals(0, fiveMinutes.status(), fiveMinutes.message());
                    assertEquals(300_000, fiveMinutes.body().getLong(0));
                }
            }
            w.assertServedWithin(SERVED_WITHIN);
            assertServesAsBefore(c, w);
        }
    }
}
