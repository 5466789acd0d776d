package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionServerProcess;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.tcp.FreezingRelay;
import dev.rbridge.rdma.wire.Message;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Revocation on the ucx provider, with the memserver side in this JVM (a {@link UcxListener} over
 * {@link ArenaRegionServiceForTests}, UCX_TLS=tcp as every test here) so a test can stall either progress thread at a
 * chosen moment and make a memserver withdraw a key when it wants: the races become orderings.
 */
@Tag("fault")
@Timeout(120)
class UcxRevocationTest {
    static final String TOKEN = "revocation";

    private UcxLoopback loopback;

    @AfterEach
    void tearDown() {
        UcxConnection.afterSendForTests = null;
        if (loopback != null) {
            loopback.close();
        }
    }

    private UcxListener listen() throws Exception {
        loopback = new UcxLoopback(TOKEN);
        return loopback.listener;
    }

    private UcxConnection connect(UcxListener l) throws RemoteMemoryException {
        return loopback.connect("revocation");
    }

    private static RemoteMemoryException failure(CompletableFuture<?> op) {
        ExecutionException e = assertThrows(ExecutionException.class, () -> op.get(30, TimeUnit.SECONDS));
        return assertInstanceOf(RemoteMemoryException.class, e.getCause());
    }

    private static void await(CountDownLatch latch) {
        try {
            if (!latch.await(60, TimeUnit.SECONDS)) {
                throw new IllegalStateException("latch not released within 60 s");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /**
     * The memserver answers a MAP and withdraws the key at once (a release or a lease takeover right behind it), and
     * the client handles both before the thread that asked for the mapping resumes. The mapping must come out
     * withdrawn, and the operation waiting for it must map afresh: it used to be unpacked as valid, and the read went
     * out with a key the memserver had already deregistered (here: read without a registration listed).
     */
    @Test
    void aMapReplyFollowedAtOnceByAnInvalidateLeavesNoWithdrawnKeyInUse() throws Exception {
        UcxListener l = listen();
        try (UcxConnection c = connect(l); Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("race"), 1 << 20).get(30, TimeUnit.SECONDS);
            byte[] pattern = new byte[4096];
            for (int i = 0; i < pattern.length; i++) {
                pattern[i] = (byte) (i * 7 + 3);
            }
            MemorySegment src = arena.allocate(4096);
            MemorySegment.copy(pattern, 0, src, ValueLayout.JAVA_BYTE, 0, pattern.length);
            c.write(r, 0, src).get(30, TimeUnit.SECONDS);
            // Withdrawn once, so the next data operation maps again, from the caller's thread.
            l.invalidate(List.of(r.id()), false).get(30, TimeUnit.SECONDS);
            assertFalse(l.registered(r.id()));

            AtomicBoolean armed = new AtomicBoolean(true);
            AtomicReference<Throwable> seamFailed = new AtomicReference<>();
            UcxConnection.afterSendForTests = m -> {
                if (!(m instanceof Message.MapRegion) || !armed.getAndSet(false)) {
                    return;
                }
                try {
                    // The MAP reply is sent under the connection's write lock, with the registration listed first,
                    // so the INVALIDATE below goes out right behind it; the client has answered it when this returns.
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                    while (!l.registered(r.id()) && System.nanoTime() < until) {
                        Thread.onSpinWait();
                    }
                    l.invalidate(List.of(r.id()), false).get(30, TimeUnit.SECONDS);
                } catch (Exception e) {
                    seamFailed.set(e);
                }
            };
            MemorySegment dst = arena.allocate(4096);
            c.read(r, 0, dst).get(30, TimeUnit.SECONDS);
            assertNull(seamFailed.get());
            assertFalse(armed.get(), "the read did not map the region again");
            assertTrue(l.registered(r.id()), "the read went out with a remote key the memserver had withdrawn");
            assertArrayEquals(pattern, dst.toArray(ValueLayout.JAVA_BYTE));
        }
    }

    /**
     * A close while the progress thread is stuck (a completion that blocks, here a task that waits) and reads are
     * posted to UCX (the memserver, a process of its own, frozen with SIGSTOP, so UCX cannot finish them). The reads
     * must not fail until the endpoint is closed: failing them hands their buffers back, NBD's to its pool for the
     * next request, while the NIC may still write into them. The one-second back-stop used to fail them all.
     */
    @Test
    void aCloseFailsNoOperationWhoseBufferUcxStillHolds() throws Exception {
        CountDownLatch clientStalled = new CountDownLatch(1);
        CountDownLatch releaseClient = new CountDownLatch(1);
        try (RegionServerProcess server = RegionServerProcess.start("ucx", TOKEN);
                UcxConnection c = (UcxConnection) new UcxProvider().connect(new ConnectParams().address(server.address)
                        .token(TOKEN).clientName("revocation").operationTimeout(Duration.ofSeconds(60)));
                Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("held"), 1 << 20).get(30, TimeUnit.SECONDS);
            c.read(r, 0, arena.allocate(4096)).get(30, TimeUnit.SECONDS); // mapped, wired up

            server.signal("STOP");
            try {
                List<CompletableFuture<Void>> reads = new ArrayList<>();
                for (int i = 0; i < 8; i++) {
                    reads.add(c.read(r, i * 4096L, arena.allocate(4096)));
                }
                c.loop().call(() -> null, 30_000); // runs after the drain that posted them
                c.loop().execute(() -> {
                    clientStalled.countDown();
                    await(releaseClient);
                });
                await(clientStalled);
                for (CompletableFuture<Void> f : reads) {
                    assertFalse(f.isDone(), "a read completed with the memserver frozen");
                }

                c.close();
                Thread.sleep(2_500); // past the one-second back-stop
                for (CompletableFuture<Void> f : reads) {
                    assertFalse(f.isDone(), "a read failed while UCX still held its buffer");
                }
                releaseClient.countDown();
                for (CompletableFuture<Void> f : reads) {
                    assertEquals(Status.CONNECTION_LOST, failure(f).status());
                }
            } finally {
                releaseClient.countDown();
                server.signal("CONT");
            }
        }
    }

    /**
     * A client cut off on its control connection but not on the data path (a firewall rule, a partition of one port)
     * does not answer the INVALIDATE of a region another client released, and is disconnected. Where UCX emulates GET
     * and PUT it never checks a remote key, so only the end of the client's UCX connection stops it: the memserver
     * closes its own endpoint to the client, and the client's next read fails. It used to go on reading the released
     * region's memory as if nothing had happened.
     */
    @Test
    void aClientCutOffOnItsControlConnectionLosesTheDataPathWhenDisconnected() throws Exception {
        loopback = new UcxLoopback(TOKEN, new ListenParams().address(new InetSocketAddress("127.0.0.1", 0))
                .helloTimeout(Duration.ofSeconds(1)));
        UcxListener listener = loopback.listener;
        try (FreezingRelay control = new FreezingRelay(listener.address());
                UcxConnection a =
                        (UcxConnection) new UcxProvider().connect(new ConnectParams().address(control.address())
                                .token(TOKEN).clientName("cut-off").operationTimeout(Duration.ofSeconds(60)));
                UcxConnection b = connect(listener);
                Arena arena = Arena.ofShared()) {
            RegionDescriptor r = a.allocate(RegionTag.scratch("shared"), 1 << 20).get(30, TimeUnit.SECONDS);
            a.read(r, 0, arena.allocate(4096)).get(30, TimeUnit.SECONDS); // mapped, wired up

            control.freeze();
            b.release(r).get(30, TimeUnit.SECONDS); // after a's INVALIDATE went unanswered for the hello timeout
            assertFalse(listener.registered(r.id()));

            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            RemoteMemoryException failed = null;
            while (failed == null && System.nanoTime() < until) {
                CompletableFuture<Void> read = a.read(r, 0, arena.allocate(4096));
                try {
                    read.get(30, TimeUnit.SECONDS);
                    Thread.sleep(100);
                } catch (ExecutionException e) {
                    failed = assertInstanceOf(RemoteMemoryException.class, e.getCause());
                }
            }
            assertTrue(failed != null, "the disconnected client still read the released region 20 s later");
            assertEquals(Status.CONNECTION_LOST, failed.status());
        }
    }

    /**
     * A fence (a lease taken over: here its withdrawal alone, as the new holder's grant makes it) closes the UCX
     * endpoint of every client holding the region's key at once. The client is cut off on its control connection, so it neither
     * reads the INVALIDATE nor is disconnected before the (long) hello timeout: only the closed endpoint stops it.
     * Its reads used to go on until its control connection ended.
     */
    @Test
    void aFenceClosesTheFencedClientsEndpointAtOnce() throws Exception {
        loopback = new UcxLoopback(TOKEN, new ListenParams().address(new InetSocketAddress("127.0.0.1", 0))
                .helloTimeout(Duration.ofSeconds(90)));
        UcxListener listener = loopback.listener;
        try (FreezingRelay control = new FreezingRelay(listener.address());
                UcxConnection a =
                        (UcxConnection) new UcxProvider().connect(new ConnectParams().address(control.address())
                                .token(TOKEN).clientName("fenced").operationTimeout(Duration.ofSeconds(60)));
                Arena arena = Arena.ofShared()) {
            RegionDescriptor r = a.allocate(RegionTag.scratch("fenced"), 1 << 20).get(30, TimeUnit.SECONDS);
            a.read(r, 0, arena.allocate(4096)).get(30, TimeUnit.SECONDS); // mapped, wired up

            control.freeze();
            CompletableFuture<Void> withdrawn = listener.fence(List.of(r.id()), null);
            assertEquals(Status.CONNECTION_LOST, readsUntilFailure(a, r, arena, 5).status());
            assertFalse(withdrawn.isDone() && withdrawn.isCompletedExceptionally());
        }
    }

    /**
     * The memserver's disconnect (an operator's, or a drained takeover cutting off a fenced client) closes the
     * client's UCX endpoint itself, not only its control connection: a client cut off on its control connection (which
     * then never sees it close) loses its data path within seconds.
     */
    @Test
    void aDisconnectClosesTheClientsEndpoint() throws Exception {
        loopback = new UcxLoopback(TOKEN, new ListenParams().address(new InetSocketAddress("127.0.0.1", 0))
                .helloTimeout(Duration.ofSeconds(90)));
        UcxListener listener = loopback.listener;
        try (HoldingRelay control = new HoldingRelay(listener.address());
                UcxConnection a =
                        (UcxConnection) new UcxProvider().connect(new ConnectParams().address(control.address())
                                .token(TOKEN).clientName("disconnected").operationTimeout(Duration.ofSeconds(60)));
                Arena arena = Arena.ofShared()) {
            RegionDescriptor r = a.allocate(RegionTag.scratch("cut"), 1 << 20).get(30, TimeUnit.SECONDS);
            a.read(r, 0, arena.allocate(4096)).get(30, TimeUnit.SECONDS);

            control.hold();
            long session = loopback.service.sessions().stream().filter(s -> s.name().equals("disconnected"))
                    .findFirst().orElseThrow().id();
            assertTrue(loopback.service.disconnect(session));
            assertEquals(Status.CONNECTION_LOST, readsUntilFailure(a, r, arena, 5).status());
        }
    }

    /** Reads the region's first block every 100 ms until a read fails (its failure) or {@code seconds} pass (fails). */
    private static RemoteMemoryException readsUntilFailure(UcxConnection c, RegionDescriptor r, Arena arena,
            int seconds) throws Exception {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (System.nanoTime() < until) {
            try {
                c.read(r, 0, arena.allocate(4096)).get(30, TimeUnit.SECONDS);
                Thread.sleep(100);
            } catch (ExecutionException e) {
                return assertInstanceOf(RemoteMemoryException.class, e.getCause());
            }
        }
        throw new AssertionError("the client still read the region " + seconds + " s later");
    }
}
