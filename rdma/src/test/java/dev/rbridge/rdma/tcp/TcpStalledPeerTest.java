package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A peer that goes silent at a chosen byte ({@link FreezingRelay} between a listener and the client): in the middle
 * of a reply, and while another connection's failure callbacks write to it. Both used to hang: the watchdog
 * did not watch a reply being read, and it ran failure callbacks on the one timer thread every watchdog shares.
 */
@Timeout(120)
class TcpStalledPeerTest {
    static final String TOKEN = "stalled";
    static final Duration OP_TIMEOUT = Duration.ofSeconds(1);
    @RegisterExtension
    static final LoopbackTcpListener memserver = new LoopbackTcpListener(TOKEN);

    RemoteConnection connect(InetSocketAddress address, boolean callerDriven) throws RemoteMemoryException {
        return new TcpProvider().connect(new ConnectParams().address(address).token(TOKEN).clientName("stalled")
                .callerDriven(callerDriven).operationTimeout(OP_TIMEOUT));
    }

    static RemoteMemoryException failure(CompletableFuture<?> op) {
        ExecutionException e = assertThrows(ExecutionException.class, () -> op.get(30, TimeUnit.SECONDS));
        return assertInstanceOf(RemoteMemoryException.class, e.getCause());
    }

    @ParameterizedTest(name = "callerDriven={0}")
    @ValueSource(booleans = {false, true})
    void aReplyThatStopsHalfwayFailsWithinTheTimeoutAndOthersGoOn(boolean callerDriven) throws Exception {
        try (FreezingRelay relay = new FreezingRelay(memserver.address());
                RemoteConnection c = connect(relay.address(), callerDriven);
                RemoteConnection other = connect(memserver.address(), callerDriven);
                Arena arena = Arena.ofShared()) {
            int size = 8 << 20;
            RegionDescriptor r = c.allocate(RegionTag.scratch("halfway"), size).get(10, TimeUnit.SECONDS);
            c.write(r, 0, arena.allocate(size).fill((byte) 0x5a)).get(10, TimeUnit.SECONDS);

            relay.passDown(1 << 20); // the READ reply's header and its first MiB, then nothing
            CompletableFuture<Void> read = c.read(r, 0, arena.allocate(size));
            RemoteMemoryException e = assertTimeoutPreemptively(OP_TIMEOUT.multipliedBy(8), () -> failure(read),
                    "a reply that stopped halfway must fail its operation at the timeout, not hang");
            assertEquals(Status.TIMEOUT, e.status(), e.getMessage());
            assertTrue(e.getMessage().contains("did not finish its READ reply"), e.getMessage());
            assertFalse(c.isOpen());

            RegionDescriptor o = other.allocate(RegionTag.scratch("unharmed"), 1 << 20).get(10, TimeUnit.SECONDS);
            MemorySegment data = arena.allocate(1 << 20).fill((byte) 3);
            MemorySegment back = arena.allocate(1 << 20);
            other.write(o, 0, data).get(10, TimeUnit.SECONDS);
            other.read(o, 0, back).get(10, TimeUnit.SECONDS);
            assertArrayEquals(data.toArray(ValueLayout.JAVA_BYTE), back.toArray(ValueLayout.JAVA_BYTE));
        }
    }

    @Test
    void aFailureCallbackBlockedWritingToAnotherSilentPeerDoesNotStopItsWatchdog() throws Exception {
        try (FreezingRelay relayA = new FreezingRelay(memserver.address());
                FreezingRelay relayB = new FreezingRelay(memserver.address());
                RemoteConnection a = connect(relayA.address(), false);
                RemoteConnection b = connect(relayB.address(), false);
                Arena arena = Arena.ofShared()) {
            RegionDescriptor ra = a.allocate(RegionTag.scratch("a"), 1 << 20).get(10, TimeUnit.SECONDS);
            RegionDescriptor rb = b.allocate(RegionTag.scratch("b"), 16 << 20).get(10, TimeUnit.SECONDS);
            MemorySegment big = arena.allocate(16 << 20);
            relayA.freeze();
            relayB.freeze();

            // A times out first; its failure callback writes far more to B than B's socket buffers hold, and B's
            // memserver reads nothing: that write blocks until B is declared dead, which only B's watchdog does.
            List<CompletableFuture<Void>> fromCallback = new CopyOnWriteArrayList<>();
            CompletableFuture<Void> onA = a.read(ra, 0, arena.allocate(4096));
            CompletableFuture<Void> callbackDone = onA.handle((v, t) -> {
                for (int i = 0; i < 4; i++) {
                    fromCallback.add(b.write(rb, 0, big));
                }
                return null;
            });
            Thread.sleep(OP_TIMEOUT.toMillis() / 4);
            CompletableFuture<Void> onB = b.write(rb, 0, arena.allocate(4096));

            assertTimeoutPreemptively(OP_TIMEOUT.multipliedBy(8), () -> {
                assertEquals(Status.TIMEOUT, failure(onA).status());
                RemoteMemoryException e = failure(onB);
                assertEquals(Status.TIMEOUT, e.status(), e.getMessage());
                callbackDone.get(30, TimeUnit.SECONDS);
                assertEquals(4, fromCallback.size());
                for (CompletableFuture<Void> w : fromCallback) {
                    failure(w);
                }
            }, "B's watchdog must run while A's failure callback is blocked writing to B");
        }
    }
}
