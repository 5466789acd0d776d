package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Operations issued from completion callbacks, which run on the thread that reads replies (perftest-style chains, and
 * how the bridge answers NBD). That thread writes such requests itself when their replies cannot fill the socket, and
 * leaves the rest to the flusher: here 16 chains of 4 MiB reads and writes keep far more reply bytes in flight than
 * the socket buffers hold, which would deadlock the stream if the reading thread ever blocked in a write the
 * memserver's replies were stuck behind (the operation timeout would then end the connection).
 */
@Timeout(120)
class TcpCompletionChainsTest {
    static final String TOKEN = "chains";
    @RegisterExtension
    static final LoopbackTcpListener memserver = new LoopbackTcpListener(TOKEN);

    @ParameterizedTest(name = "callerDriven={0}")
    @ValueSource(booleans = {false, true})
    void chainsOfLargeReadsAndWritesNeverStallTheConnection(boolean callerDriven) throws Exception {
        int chains = 16;
        int size = 4 << 20;
        int perChain = 24;
        try (RemoteConnection c = new TcpProvider().connect(new ConnectParams().address(memserver.address())
                .token(TOKEN).clientName("chains").callerDriven(callerDriven).operationTimeout(Duration.ofSeconds(5)));
                Arena arena = Arena.ofShared()) {
            RegionDescriptor r =
                    c.allocate(RegionTag.scratch("chains"), (long) chains * size).get(10, TimeUnit.SECONDS);
            CompletableFuture<?>[] done = new CompletableFuture<?>[chains];
            AtomicInteger ops = new AtomicInteger();
            for (int k = 0; k < chains; k++) {
                MemorySegment buf = arena.allocate(size).fill((byte) k);
                CompletableFuture<Void> chain = new CompletableFuture<>();
                done[k] = chain;
                next(c, r, (long) k * size, buf, 0, perChain, ops, chain);
            }
            CompletableFuture.allOf(done).get(90, TimeUnit.SECONDS);
            assertEquals(chains * perChain, ops.get());
            assertTrue(c.isOpen(), "the connection survived");
            for (int k = 0; k < chains; k++) {
                MemorySegment back = arena.allocate(size);
                c.read(r, (long) k * size, back).get(10, TimeUnit.SECONDS);
                assertEquals((byte) k, back.get(ValueLayout.JAVA_BYTE, size - 1), "chain " + k + "'s slot");
            }
        }
    }

    /** Alternates write and read of one slot, each issued from the previous one's completion. */
    private static void next(RemoteConnection c, RegionDescriptor r, long offset, MemorySegment buf, int i, int n,
            AtomicInteger ops, CompletableFuture<Void> chain) {
        if (i == n) {
            chain.complete(null);
            return;
        }
        CompletableFuture<Void> op = i % 2 == 0 ? c.write(r, offset, buf) : c.read(r, offset, buf);
        op.whenComplete((v, t) -> {
            if (t != null) {
                chain.completeExceptionally(t);
            } else {
                ops.incrementAndGet();
                next(c, r, offset, buf, i + 1, n, ops, chain);
            }
        });
    }
}
