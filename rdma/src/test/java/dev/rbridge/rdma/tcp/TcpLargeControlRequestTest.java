package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.wire.Protocol;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Control requests at the size limit: up to {@link Protocol#MAX_CONTROL_BODY} bytes of body they go out and are
 * answered; beyond it they fail at once. A body of 65513 to 65536 bytes used to fit the limit but not the writer's
 * batch buffer, and the writing thread spun for ever trying to fit it.
 */
@Timeout(60)
class TcpLargeControlRequestTest {
    static final String TOKEN = "large";
    @RegisterExtension
    static final LoopbackTcpListener memserver = new LoopbackTcpListener(TOKEN);

    /**
     * A LEASE whose body is {@code bodyBytes}: two strings (2 bytes of length each), the 8-byte ttl and the 8-byte
     * lease id.
     */
    static CompletableFuture<Lease> leaseOfBody(RemoteConnection c, int bodyBytes) {
        int strings = bodyBytes - 2 - 2 - 8 - 8;
        String volume = "v".repeat(strings / 2);
        String owner = "o".repeat(strings - strings / 2);
        return c.lease(volume, owner, Duration.ofSeconds(30));
    }

    @Test
    void aRequestAtTheLimitIsAnsweredAndOneOverItFailsAtOnceAndNothingSpins() throws Exception {
        try (RemoteConnection c = new TcpProvider().connect(new ConnectParams().address(memserver.address())
                .token(TOKEN).clientName("large").operationTimeout(Duration.ofSeconds(30)))) {
            for (int body : new int[]{Protocol.MAX_CONTROL_BODY - Protocol.HEADER + 1, Protocol.MAX_CONTROL_BODY}) {
                // Issued from a thread of its own: the issuing thread is the one that used to spin.
                CompletableFuture<CompletableFuture<Lease>> issued = new CompletableFuture<>();
                Thread.ofPlatform().daemon().name("test-issue").start(() -> issued.complete(leaseOfBody(c, body)));
                CompletableFuture<Lease> lease = issued.get(10, TimeUnit.SECONDS);
                Lease granted = lease.get(10, TimeUnit.SECONDS);
                assertEquals(30_000, granted.ttlMillis(), "body of " + body + " bytes");
            }
            CompletableFuture<Lease> over = leaseOfBody(c, Protocol.MAX_CONTROL_BODY + 1);
            assertTrue(over.isDone(), "a request over the limit fails before it is sent");
            ExecutionException e = assertThrows(ExecutionException.class, over::get);
            assertEquals(Status.BAD_REQUEST, assertInstanceOf(RemoteMemoryException.class, e.getCause()).status());
            assertTrue(c.isOpen(), "and the connection goes on");
            assertNoProviderThreadSpins();
        }
    }

    /** No thread of the provider (reader, flusher) burns more than a fifth of the CPU time over half a second. */
    static void assertNoProviderThreadSpins() throws InterruptedException {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        Map<Thread, Long> before = new HashMap<>();
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.getName().startsWith("rdma-")) {
                before.put(t, mx.getThreadCpuTime(t.threadId()));
            }
        }
        long window = TimeUnit.MILLISECONDS.toNanos(500);
        Thread.sleep(TimeUnit.NANOSECONDS.toMillis(window));
        before.forEach((t, cpu) -> {
            long used = mx.getThreadCpuTime(t.threadId()) - cpu;
            assertTrue(cpu < 0 || used < window / 5, t.getName() + " used " + used / 1_000_000 + " ms of CPU in "
                    + window / 1_000_000 + " ms");
        });
    }
}
