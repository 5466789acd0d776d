package dev.rbridge.memserver;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.RemoteMemoryProvider;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

import java.io.DataInputStream;
import java.io.OutputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * What every remote-memory provider must do, checked against a memserver in its own JVM. A provider's suite extends
 * this and names the provider.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(120)
abstract class ProviderContractTest {
    static final String TOKEN = "contract-secret";
    static final long CAPACITY = 512L << 20;
    static final Duration TIMEOUT = Duration.ofSeconds(2);

    Target memserver;

    /** A memserver as the suite needs it: where it listens, and how to kill or freeze it for real. */
    interface Target extends AutoCloseable {
        InetSocketAddress address();

        void kill() throws Exception;

        /** False where the provider has no wire to freeze or corrupt (in-process). */
        boolean hasWire();

        void freeze() throws Exception;

        void thaw() throws Exception;
    }

    abstract RemoteMemoryProvider provider();

    abstract Target start(long capacity) throws Exception;

    @BeforeAll
    void startMemServer() throws Exception {
        memserver = start(CAPACITY);
    }

    @AfterAll
    void stopMemServer() throws Exception {
        memserver.close();
    }

    RemoteConnection connect(Target m, String token) throws RemoteMemoryException {
        return provider().connect(new ConnectParams().address(m.address()).token(token).clientName("contract")
                .operationTimeout(TIMEOUT).connectTimeout(Duration.ofSeconds(5)));
    }

    static Status statusOf(CompletableFuture<?> f) throws InterruptedException, TimeoutException {
        try {
            f.get(30, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof RemoteMemoryException r) {
                return r.status();
            }
            throw new AssertionError("failed with something other than RemoteMemoryException", e.getCause());
        }
        throw new AssertionError("expected a failure, the operation succeeded");
    }

    static byte[] bytes(MemorySegment s) {
        return s.toArray(ValueLayout.JAVA_BYTE);
    }

    @Test
    void concurrentRandomReadsWritesAndZeroesMatchAModel() throws Exception {
        try (RemoteConnection c = connect(memserver, TOKEN); Arena arena = Arena.ofShared()) {
            long size = 64L << 20;
            RegionDescriptor r = c.allocate(RegionTag.scratch("integrity"), size).get();
            assertEquals(size, r.length());
            int threads = 4;
            long slice = size / threads;
            List<Thread> workers = new ArrayList<>();
            List<Throwable> errors = java.util.Collections.synchronizedList(new ArrayList<>());
            for (int t = 0; t < threads; t++) {
                int id = t;
                workers.add(Thread.ofPlatform().start(() -> {
                    try {
                        hammer(c, r, arena, id * slice, (int) slice, new Random(id));
                    } catch (Throwable e) {
                        errors.add(e);
                    }
                }));
            }
            for (Thread w : workers) {
                w.join();
            }
            if (!errors.isEmpty()) {
                throw new AssertionError(errors.get(0));
            }
            assertTrue(c.stats().snapshot().writeOps() > 1000);
        }
    }

    /** Thousands of operations on one slice, up to 32 in flight on disjoint chunks, then a full check. */
    private static void hammer(RemoteConnection c, RegionDescriptor r, Arena arena, long base, int length, Random rnd)
            throws Exception {
        byte[] model = new byte[length];
        int chunk = 256 << 10;
        int chunks = length / chunk;
        Semaphore window = new Semaphore(32);
        List<CompletableFuture<?>> all = new ArrayList<>();
        for (int round = 0; round < 50; round++) {
            // one op per chunk per round: ops in flight never overlap
            for (int k = 0; k < chunks; k++) {
                int off = rnd.nextInt(chunk - 1);
                int len = 1 + rnd.nextInt(Math.min(chunk - off, 64 << 10));
                long at = base + (long) k * chunk + off;
                int modelAt = k * chunk + off;
                window.acquire();
                CompletableFuture<?> f;
                switch (rnd.nextInt(3)) {
                    case 0 -> {
                        byte[] data = new byte[len];
                        rnd.nextBytes(data);
                        System.arraycopy(data, 0, model, modelAt, len);
                        MemorySegment src = arena.allocate(len);
                        src.copyFrom(MemorySegment.ofArray(data));
                        f = c.write(r, at, src);
                    }
                    case 1 -> {
                        java.util.Arrays.fill(model, modelAt, modelAt + len, (byte) 0);
                        f = c.zero(r, at, len);
                    }
                    default -> {
                        MemorySegment dst = arena.allocate(len);
                        byte[] expected = java.util.Arrays.copyOfRange(model, modelAt, modelAt + len);
                        f = c.read(r, at, dst).thenRun(() -> {
                            if (!java.util.Arrays.equals(expected, bytes(dst))) {
                                throw new AssertionError("read at " + at + "+" + len + " differs from the model");
                            }
                        });
                    }
                }
                f.whenComplete((v, t) -> window.release());
                all.add(f);
            }
            CompletableFuture.allOf(all.toArray(CompletableFuture[]::new)).get(60, TimeUnit.SECONDS);
            all.clear();
        }
        c.flush().get(10, TimeUnit.SECONDS);
        MemorySegment whole = arena.allocate(length);
        c.read(r, base, whole).get(30, TimeUnit.SECONDS);
        assertArrayEquals(model, bytes(whole), "slice at " + base);
    }

    @Test
    void fullDuplexBurstsFromManyThreadsAndCallbacksNeverDeadlock() throws Exception {
        // Writers fill the socket towards the memserver while replies fill the socket back, and completion callbacks
        // issue more requests: a transport whose reader can wait for a writer would hang here.
        try (RemoteConnection c = connect(memserver, TOKEN); Arena arena = Arena.ofShared()) {
            int slot = 4 << 20;
            RegionDescriptor r = c.allocate(RegionTag.scratch("duplex"), 64L * slot).get();
            List<CompletableFuture<?>> all = java.util.Collections.synchronizedList(new ArrayList<>());
            List<Thread> threads = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                int base = t * 16;
                threads.add(Thread.ofPlatform().start(() -> {
                    for (int i = 0; i < 16; i++) {
                        long at = (long) (base + i) * slot;
                        MemorySegment src = arena.allocate(slot).fill((byte) i);
                        MemorySegment dst = arena.allocate(slot);
                        all.add(c.write(r, at, src));
                        CompletableFuture<Void> again = new CompletableFuture<>();
                        all.add(again);
                        all.add(c.read(r, at, dst).whenComplete((v, e) ->
                                c.read(r, at, dst).whenComplete((v2, e2) -> again.complete(null))));
                    }
                }));
            }
            for (Thread t : threads) {
                t.join();
            }
            CompletableFuture.allOf(all.toArray(CompletableFuture[]::new)).get(60, TimeUnit.SECONDS);
            assertTrue(c.isOpen());
        }
    }

    @Test
    void largeTransfersAreSplitAndComeBackWhole() throws Exception {
        try (RemoteConnection c = connect(memserver, TOKEN); Arena arena = Arena.ofShared()) {
            int size = 40 << 20; // above the tcp provider's per-message data limit
            RegionDescriptor r = c.allocate(RegionTag.scratch("large"), size).get();
            byte[] data = new byte[size];
            new Random(9).nextBytes(data);
            MemorySegment src = arena.allocate(size);
            src.copyFrom(MemorySegment.ofArray(data));
            c.write(r, 0, src).get(60, TimeUnit.SECONDS);
            MemorySegment dst = arena.allocate(size);
            c.read(r, 0, dst).get(60, TimeUnit.SECONDS);
            assertArrayEquals(data, bytes(dst));
            c.release(r).get();
        }
    }

    @Test
    void regionsAreZeroedOnGrantAndIsolatedByKey() throws Exception {
        try (RemoteConnection a = connect(memserver, TOKEN); RemoteConnection b = connect(memserver, TOKEN);
             Arena arena = Arena.ofShared()) {
            RegionDescriptor r = a.allocate(new RegionTag("vol", 3, 1, 7), 1 << 20).get();
            MemorySegment dst = arena.allocate(1 << 20);
            dst.fill((byte) 0x5A);
            a.read(r, 0, dst).get();
            assertArrayEquals(new byte[1 << 20], bytes(dst), "a new region reads as zeroes");

            RegionDescriptor forged = new RegionDescriptor(r.id(), r.length(), r.key() ^ 1, r.tag());
            assertEquals(Status.ACCESS_DENIED, statusOf(b.write(forged, 0, arena.allocate(16))));
            assertEquals(Status.ACCESS_DENIED, statusOf(b.read(forged, 0, arena.allocate(16))));
            assertEquals(Status.ACCESS_DENIED, statusOf(b.release(forged)));
            assertEquals(Status.OUT_OF_RANGE, statusOf(a.read(r, (1 << 20) - 8, arena.allocate(16))));
            assertEquals(Status.NO_SUCH_REGION, statusOf(a.read(new RegionDescriptor(999_999, 1, 1, r.tag()), 0,
                    arena.allocate(1))));
            // refused operations leave both connections working
            MemorySegment src = arena.allocate(16).fill((byte) 7);
            a.write(r, 0, src).get();
            assertTrue(b.list().get().stream().anyMatch(i -> i.descriptor().id() == r.id()
                    && i.descriptor().tag().equals(new RegionTag("vol", 3, 1, 7))));
            a.release(r).get();
            assertEquals(Status.NO_SUCH_REGION, statusOf(a.read(r, 0, arena.allocate(1))));
        }
    }

    @Test
    void aReadIntoThreadConfinedMemoryIsRefusedNotHung() throws Exception {
        try (RemoteConnection c = connect(memserver, TOKEN); Arena confined = Arena.ofConfined()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("confined"), 4096).get();
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> c.read(r, 0, confined.allocate(64)).get(5, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof IllegalArgumentException, e.getCause().toString());
            assertTrue(c.isOpen());
            c.release(r).get();
        }
    }

    @Test
    void aWrongTokenIsRefusedWithAClearError() {
        RemoteMemoryException e = assertThrows(RemoteMemoryException.class, () -> connect(memserver, "guess"));
        assertEquals(Status.AUTH_FAILED, e.status());
        assertTrue(e.getMessage().contains("wrong token"), e.getMessage());
    }

    @Test
    void exhaustedCapacityGivesACleanError() throws Exception {
        try (RemoteConnection c = connect(memserver, TOKEN)) {
            assertEquals(Status.NO_CAPACITY, statusOf(c.allocate(RegionTag.scratch("huge"), CAPACITY + 4096)));
            RegionDescriptor small = c.allocate(RegionTag.scratch("small"), 4096).get();
            c.release(small).get();
        }
    }

    @Test
    void malformedAndTruncatedMessagesHurtNoOtherClient() throws Exception {
        Assumptions.assumeTrue(memserver.hasWire(), "an in-process provider has no wire to corrupt");
        try (RemoteConnection good = connect(memserver, TOKEN); Arena arena = Arena.ofShared()) {
            RegionDescriptor r = good.allocate(RegionTag.scratch("bystander"), 4096).get();
            byte[][] attacks = {
                    "GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(), // bad magic
                    new byte[]{0x52, 0x42, 0x52}, // a truncated header, then silence
                    java.nio.ByteBuffer.allocate(24).order(java.nio.ByteOrder.LITTLE_ENDIAN)
                            .putInt(0x4D524252).putShort((short) 1).putShort((short) 1).putLong(0).putInt(0)
                            .putInt(Integer.MAX_VALUE).array(), // a HELLO claiming 2 GiB
            };
            for (byte[] attack : attacks) {
                try (Socket s = new Socket(memserver.address().getAddress(), memserver.address().getPort())) {
                    s.setSoTimeout(15_000);
                    OutputStream out = s.getOutputStream();
                    out.write(attack);
                    out.flush();
                    if (attack.length == 3) {
                        s.shutdownOutput();
                    }
                    DataInputStream in = new DataInputStream(s.getInputStream());
                    while (in.read() >= 0) {
                        // the memserver answers or just closes; either way it must close
                    }
                }
                MemorySegment src = arena.allocate(8).fill((byte) 3);
                good.write(r, 0, src).get(5, TimeUnit.SECONDS);
                MemorySegment dst = arena.allocate(8);
                good.read(r, 0, dst).get(5, TimeUnit.SECONDS);
                assertArrayEquals(bytes(src), bytes(dst));
            }
        }
    }

    @Test
    void aClientSpeakingAnotherProtocolVersionIsRefusedWithBothVersionsNamed() throws Exception {
        Assumptions.assumeTrue(memserver.hasWire(), "an in-process provider has no wire version");
        byte[] token = TOKEN.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        java.nio.ByteBuffer hello = java.nio.ByteBuffer.allocate(24 + 2 + token.length + 2)
                .order(java.nio.ByteOrder.LITTLE_ENDIAN)
                .putInt(0x4D524252).putShort((short) 2).putShort((short) 1).putLong(1).putInt(0)
                .putInt(2 + token.length + 2).putShort((short) token.length).put(token).putShort((short) 0);
        try (Socket s = new Socket(memserver.address().getAddress(), memserver.address().getPort())) {
            s.setSoTimeout(10_000);
            s.getOutputStream().write(hello.array());
            byte[] reply = new DataInputStream(s.getInputStream()).readAllBytes();
            java.nio.ByteBuffer r = java.nio.ByteBuffer.wrap(reply).order(java.nio.ByteOrder.LITTLE_ENDIAN);
            assertTrue(reply.length > 26, "expected an error reply before the close");
            assertEquals(RemoteMemoryException.Status.VERSION_MISMATCH.code(), r.getInt(16));
            String message = new String(reply, 26, reply.length - 26, java.nio.charset.StandardCharsets.UTF_8);
            assertTrue(message.contains("v1") && message.contains("v2"), message);
        }
    }

    @Test
    void aKilledMemserverFailsEveryPendingOperationWithinTheTimeout() throws Exception {
        try (Target victim = start(256L << 20);
             RemoteConnection c = connect(victim, TOKEN); Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("victim"), 64L << 20).get();
            List<CompletableFuture<Void>> pending = new ArrayList<>();
            for (int i = 0; i < 64; i++) {
                pending.add(c.read(r, (long) i << 20, arena.allocate(1 << 20)));
            }
            victim.kill();
            long start = System.nanoTime();
            for (CompletableFuture<Void> f : pending) {
                try {
                    f.get(TIMEOUT.toMillis() * 3, TimeUnit.MILLISECONDS);
                } catch (ExecutionException e) {
                    assertTrue(e.getCause() instanceof RemoteMemoryException, e.getCause().toString());
                }
            }
            assertTrue(System.nanoTime() - start < TIMEOUT.toNanos() * 3);
            assertEquals(Status.CONNECTION_LOST, statusOf(c.read(r, 0, arena.allocate(8))),
                    "later operations fail at once");
            assertFalse(c.isOpen());
            // the client side stays usable for other memservers
            try (RemoteConnection other = connect(memserver, TOKEN)) {
                RegionDescriptor o = other.allocate(RegionTag.scratch("survivor"), 4096).get();
                other.write(o, 0, arena.allocate(8)).get(5, TimeUnit.SECONDS);
                other.release(o).get();
            }
        }
    }

    @Test
    void aStoppedMemserverIsDetectedByTheTimeout() throws Exception {
        Assumptions.assumeTrue(memserver.hasWire(), "an in-process memserver cannot be frozen apart from its client");
        try (Target victim = start(256L << 20);
             RemoteConnection c = connect(victim, TOKEN); Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("frozen"), 1 << 20).get();
            victim.freeze();
            long start = System.nanoTime();
            assertEquals(Status.TIMEOUT, statusOf(c.read(r, 0, arena.allocate(4096))));
            long waited = System.nanoTime() - start;
            assertTrue(waited >= TIMEOUT.toNanos() - 50_000_000L, "failed too early: " + waited / 1_000_000 + " ms");
            assertTrue(waited < TIMEOUT.toNanos() * 3, "detected too late: " + waited / 1_000_000 + " ms");
            assertFalse(c.isOpen());
            victim.thaw();
        }
    }

    @Test
    void anUnreachableMemserverFailsToConnectPromptly() {
        long start = System.nanoTime();
        RemoteMemoryException e = assertThrows(RemoteMemoryException.class, () -> provider().connect(
                new ConnectParams().address(new java.net.InetSocketAddress("127.0.0.1", 1)).token(TOKEN)));
        assertEquals(Status.CONNECT_FAILED, e.status());
        assertTrue(System.nanoTime() - start < 10_000_000_000L);
        if (!e.getMessage().contains("127.0.0.1:1")) {
            fail("the error should name the address: " + e.getMessage());
        }
    }
}
