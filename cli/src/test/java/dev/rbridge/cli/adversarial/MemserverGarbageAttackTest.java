package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Garbage where a greeting belongs, and malformed requests from a client that has the token, in numbers. Each is
 * answered or cut off and hurts no one else; what it makes the memserver log is a few lines, not one per connection
 * (every refused connection was a WARN line: a flood filled the log).
 */
@Timeout(300)
class MemserverGarbageAttackTest extends MemserverAttackTest {
    static final int CONNECTIONS = 400;

    static byte[] header(int opcode, int length) {
        return ByteBuffer.allocate(24).order(ByteOrder.LITTLE_ENDIAN).putInt(0x4D524252).putShort((short) 1)
                .putShort((short) opcode).putLong(1).putInt(0).putInt(length).array();
    }

    /** Garbage number {@code i}: an HTTP request, random bytes, another magic, a greeting of 2 GiB, of 1 MiB. */
    static byte[] garbage(int i) {
        return switch (i % 5) {
            case 0 -> "GET /metrics HTTP/1.1\r\nHost: memserver\r\n\r\n".getBytes(StandardCharsets.US_ASCII);
            case 1 -> {
                byte[] b = new byte[512];
                new Random(i).nextBytes(b);
                yield b;
            }
            case 2 -> ByteBuffer.allocate(24).order(ByteOrder.LITTLE_ENDIAN).putInt(0x12345678).array();
            case 3 -> header(1, Integer.MAX_VALUE);
            default -> header(1, 1 << 20);
        };
    }

    @Test
    void garbageFloodsAreAnsweredOrCutOffAndLoggedInAFewLines() throws Exception {
        try (ServeCluster c = start(cluster("garbage")); WellBehavedClient w = wellBehaved(c, VOLUME)) {
            ExecutorService pool = Executors.newFixedThreadPool(8);
            try {
                List<Future<?>> done = new ArrayList<>();
                for (ServeCluster.Memserver m : c.memservers()) {
                    for (int t = 0; t < 4; t++) {
                        int thread = t;
                        done.add(pool.submit(() -> {
                            for (int i = thread; i < CONNECTIONS; i += 4) {
                                try (Raw r = Raw.connect(address(m), loopback(2 + i % 40))) {
                                    r.raw(garbage(i));
                                    assertTrue(r.closedByServer(5_000), "garbage " + i + " was neither refused nor "
                                            + "cut off within 5 s");
                                }
                            }
                            return null;
                        }));
                    }
                    done.add(pool.submit(() -> {
                        malformedRequests(m);
                        return null;
                    }));
                }
                for (Future<?> f : done) {
                    f.get(120, TimeUnit.SECONDS);
                }
            } finally {
                pool.shutdownNow();
            }
            w.assertServedWithin(SERVED_WITHIN);
            assertDirectMemoryBounded(c);
            assertServesAsBefore(c, w);
            for (ServeCluster.Memserver m : c.memservers()) {
                List<String> lines = m.process().log().lines().filter(l -> l.contains("malformed")).toList();
                assertTrue(lines.size() <= 8, "memserver " + m.address() + " logged " + lines.size()
                        + " lines about malformed messages for " + CONNECTIONS + " garbage connections, e.g. "
                        + lines.subList(0, Math.min(3, lines.size())));
                assertTrue(refused(m, "malformed") >= CONNECTIONS * 0.9, "memserver " + m.address() + " counted "
                        + refused(m, "malformed") + " malformed greetings");
            }
        }
    }

    /** A client with the token sends requests no honest client sends: each gets an error, the client goes on. */
    static void malformedRequests(ServeCluster.Memserver m) throws Exception {
        for (int round = 0; round < 50; round++) {
            try (Raw r = Raw.connect(address(m), null)) {
                assertEquals(0, r.hello(TOKEN, "garbage-with-token").status());
                assertEquals(STATUS_BAD_REQUEST, r.call(ALLOCATE, r.body(5).putInt(7).put((byte) 1)).status(),
                        "a truncated ALLOCATE");
                assertEquals(STATUS_BAD_REQUEST, r.call(LEASE, r.body(4).putShort((short) 9000).putShort((short) 1))
                        .status(), "a LEASE whose string overruns it");
                assertEquals(STATUS_BAD_REQUEST, r.call(READ, r.body(28).putLong(1).putLong(1).putLong(0)
                        .putInt(-1)).status(), "a READ of 4 GiB");
                assertEquals(STATUS_BAD_REQUEST, r.call(4242, r.body(3).put(new byte[3])).status(),
                        "an unknown opcode");
                assertEquals(0, r.call(LIST, r.body(0)).status(), "the connection goes on after all of it");
                r.raw(header(LIST, 1 << 30)); // a body nobody may send: this connection only is cut off
                assertTrue(r.closedByServer(5_000));
            }
        }
    }
}
