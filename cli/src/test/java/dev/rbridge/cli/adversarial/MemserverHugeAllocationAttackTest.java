package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Allocations of sizes near 2^63 from a client with the token, while another connection allocates ordinary regions.
 * Page rounding of such a size overflowed: the memserver counted a negative grant while it tried to map it (so a
 * concurrent grant could pass the capacity check with room that did not exist) and answered and logged "refused
 * -9223372036854775808 bytes". Now they are refused before any arithmetic, saying the size asked and the capacity.
 */
@Timeout(300)
class MemserverHugeAllocationAttackTest extends MemserverAttackTest {
    static final long CAPACITY = 512L << 20;

    static ByteBuffer allocate(Raw r, long length) {
        return r.body(8 + 2 + 7 + 20).putLong(length).putShort((short) 7)
                .put("attack!".getBytes(StandardCharsets.US_ASCII)).putLong(0).putInt(0).putLong(0);
    }

    @Test
    void sizesNearTwoToTheSixtyThreeAreRefusedWithoutDisturbingTheAccounts() throws Exception {
        try (ServeCluster c = start(cluster("huge-allocation")); WellBehavedClient w = wellBehaved(c, VOLUME)) {
            for (ServeCluster.Memserver m : c.memservers()) {
                AtomicBoolean stop = new AtomicBoolean();
                AtomicReference<Throwable> ordinaryFailed = new AtomicReference<>();
                // Meanwhile: an ordinary client asks for big regions and gives them back, over and over.
                Thread ordinary = Thread.ofPlatform().start(() -> {
                    try (Raw r = Raw.connect(address(m), null)) {
                        assertEquals(0, r.hello(TOKEN, "ordinary").status());
                        while (!stop.get()) {
                            Reply a = r.call(ALLOCATE, allocate(r, 256L << 20));
                            if (a.status() == 0) {
                                r.call(RELEASE, r.body(16).putLong(a.body().getLong(0)).putLong(a.body().getLong(16)));
                            }
                        }
                    } catch (Throwable t) {
                        ordinaryFailed.set(t);
                    }
                });
                try (Raw r = Raw.connect(address(m), loopback(7))) {
                    assertEquals(0, r.hello(TOKEN, "huge").status());
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(4);
                    long[] sizes = {Long.MAX_VALUE, Long.MAX_VALUE - 4094, (1L << 62) + 1, CAPACITY + 1};
                    for (int i = 0; System.nanoTime() < deadline; i++) {
                        long size = sizes[i % sizes.length];
                        Reply a = r.call(ALLOCATE, allocate(r, size));
                        assertEquals(STATUS_NO_CAPACITY, a.status(), "ALLOCATE of " + size + ": " + a.message());
                        assertTrue(a.message().contains(Long.toString(size)) && a.message().contains("capacity"),
                                "the refusal should name the size asked and the capacity: " + a.message());
                        assertFalse(a.message().matches("(?s).*-\\d.*"), "a negative size: " + a.message());
                        if (i % 16 == 0) {
                            double granted = Scrape.sum(Scrape.metrics(m.metricsAddress()),
                                    "rbridge_memserver_granted_bytes");
                            assertTrue(granted >= 0 && granted <= CAPACITY, "memserver " + m.address()
                                    + " counts " + (long) granted + " bytes granted of " + CAPACITY);
                        }
                    }
                } finally {
                    stop.set(true);
                    ordinary.join(10_000);
                }
                assertNull(ordinaryFailed.get(), "the ordinary client failed: " + ordinaryFailed.get());
                String log = m.process().log();
                assertFalse(log.contains("-9223372036854775808") || log.matches("(?s).*grant -\\d.*"),
                        "memserver " + m.address() + " logged a negative size");
            }
            w.assertServedWithin(SERVED_WITHIN);
            assertServesAsBefore(c, w);
        }
    }
}
