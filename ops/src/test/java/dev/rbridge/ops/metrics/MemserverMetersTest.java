package dev.rbridge.ops.metrics;

import dev.rbridge.memserver.Memserver;
import dev.rbridge.memserver.MemserverConfig;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.tcp.TcpProvider;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A memserver's transport counters: each kind of traffic in operations and in bytes, with its unit and words. */
@Timeout(60)
class MemserverMetersTest {
    private static final String TOKEN = "meters-secret";

    private static FunctionCounter counter(SimpleMeterRegistry registry, String name) {
        return registry.get(name).tag("transport", "tcp").functionCounter();
    }

    private static void assertCounter(SimpleMeterRegistry registry, String name, String unit, String description) {
        FunctionCounter c = counter(registry, name);
        assertEquals(description, c.getId().getDescription(), name);
        if (unit == null) {
            assertNull(c.getId().getBaseUnit(), name);
        } else {
            assertEquals(unit, c.getId().getBaseUnit(), name);
        }
    }

    @Test
    void transportTrafficIsCountedInOperationsAndInBytes() throws Exception {
        try (Memserver m = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 64L << 20, TOKEN,
                "tcp"))) {
            SimpleMeterRegistry registry = new SimpleMeterRegistry();
            MemserverMeters.bind(registry, m);
            assertCounter(registry, "rbridge.transport.send.messages", null, "Two-sided messages sent");
            assertCounter(registry, "rbridge.transport.send", "bytes", "Bytes of two-sided messages sent");
            assertCounter(registry, "rbridge.transport.recv.messages", null, "Two-sided messages received");
            assertCounter(registry, "rbridge.transport.recv", "bytes", "Bytes of two-sided messages received");
            assertCounter(registry, "rbridge.transport.read.ops", null, "One-sided reads served");
            assertCounter(registry, "rbridge.transport.read", "bytes", "Bytes of one-sided reads served");
            assertCounter(registry, "rbridge.transport.write.ops", null, "One-sided writes served");
            assertCounter(registry, "rbridge.transport.write", "bytes", "Bytes of one-sided writes served");

            try (RemoteConnection c = new TcpProvider().connect(new ConnectParams().address(m.address()).token(TOKEN)
                    .connectTimeout(Duration.ofSeconds(5)).operationTimeout(Duration.ofSeconds(5)))) {
                RegionDescriptor r = c.allocate(RegionTag.scratch("meters"), 1 << 20).get(5, TimeUnit.SECONDS);
                MemorySegment data = Arena.ofAuto().allocate(12288);
                c.write(r, 0, data).get(5, TimeUnit.SECONDS);
                c.read(r, 0, data.asSlice(0, 4096)).get(5, TimeUnit.SECONDS);
                // While the client is connected its counters are in the totals; a scrape reads them at most 200 ms old.
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (counter(registry, "rbridge.transport.write").count() < 12288
                        || counter(registry, "rbridge.transport.read").count() < 4096) {
                    assertTrue(System.nanoTime() < deadline, "the write and the read are counted");
                    Thread.sleep(20);
                }
                assertEquals(1, counter(registry, "rbridge.transport.write.ops").count(), "one write served");
                assertEquals(1, counter(registry, "rbridge.transport.read.ops").count(), "one read served");
                assertEquals(12288, counter(registry, "rbridge.transport.write").count(), "its bytes");
                assertEquals(4096, counter(registry, "rbridge.transport.read").count(), "its bytes");
                assertTrue(counter(registry, "rbridge.transport.recv.messages").count() >= 2, "hello and allocate");
                assertTrue(counter(registry, "rbridge.transport.recv").count()
                        > counter(registry, "rbridge.transport.recv.messages").count(), "messages have bytes");
            }
        }
    }
}
