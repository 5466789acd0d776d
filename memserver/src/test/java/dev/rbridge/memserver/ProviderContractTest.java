package dev.rbridge.memserver;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.ServerInfo;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageEncoder;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.io.DataInputStream;
import java.io.OutputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
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

        /** An operator's revoke of a region (the admin interface of a memserver process). */
        void revoke(long regionId) throws Exception;

        /** False where the provider has no wire to freeze or corrupt (in-process). */
        boolean hasWire();

        void freeze() throws Exception;

        void thaw() throws Exception;

        /** RAM backing the memserver's regions now (its own count). */
        long residentBytes() throws Exception;

        /**
         * Regions released or revoked whose memory is still mapped, which count against the capacity until it is (on
         * ucx, a gone client's registrations stay for a grace period where keys are not NIC-enforced).
         */
        long lingeringBytes() throws Exception;

        /** Peers the memserver turned away, by reason (its own count). */
        Map<String, Long> refused() throws Exception;

        /** Whether the memserver still runs (a process that aborted does not). */
        boolean alive();

        /** What the memserver logged, for a failure message (empty where it logs into the test's own output). */
        String logText() throws Exception;
    }

    /** A memserver in its own JVM, as {@link Target}. */
    static Target target(MemserverProcess p) {
        return new Target() {
            public InetSocketAddress address() {
                return p.address;
            }

            public void kill() throws Exception {
                p.kill();
            }

            public void revoke(long regionId) throws Exception {
                p.revoke(regionId);
            }

            public boolean hasWire() {
                return true;
            }

            public void freeze() throws Exception {
                p.signal("STOP");
            }

            public void thaw() throws Exception {
                p.signal("CONT");
            }

            public long residentBytes() throws Exception {
                return p.residentBytes();
            }

            public long lingeringBytes() throws Exception {
                return p.lingeringBytes();
            }

            public Map<String, Long> refused() throws Exception {
                return p.refused();
            }

            public boolean alive() {
                return p.process.isAlive();
            }

            public String logText() throws Exception {
                return p.logText();
            }

            public void close() throws Exception {
                p.close();
            }
        };
    }

    abstract RemoteMemoryProvider provider();

    /** Connections per client connection (ConnectParams#lanes); a suite may run the whole contract over several. */
    int lanes() {
        return 1;
    }

    /** ConnectParams#callerDriven: a suite may run the whole contract with waiting callers reading replies. */
    boolean callerDriven() {
        return false;
    }

    /** A memserver with the default hello timeout. */
    Target start(long capacity) throws Exception {
        return start(capacity, null);
    }

    /** A memserver that cuts off peers that have not greeted within {@code helloTimeout} (null: its default). */
    abstract Target start(long capacity, Duration helloTimeout) throws Exception;

    /**
     * Whether a device (an RDMA NIC) holds the memory this provider's memserver hands to its clients, so that ZERO
     * fills it rather than give its pages back.
     */
    boolean deviceHoldsRegisteredMemory() {
        return false;
    }

    @BeforeAll
    void startMemserver() throws Exception {
        memserver = start(CAPACITY);
    }

    @AfterAll
    void stopMemserver() throws Exception {
        memserver.close();
    }

    RemoteConnection connect(Target m, String token) throws RemoteMemoryException {
        return connect(m, token, TIMEOUT);
    }

    RemoteConnection connect(Target m, String token, Duration operationTimeout) throws RemoteMemoryException {
        return provider().connect(new ConnectParams().address(m.address()).token(token).clientName("contract")
                .lanes(lanes()).callerDriven(callerDriven())
                .operationTimeout(operationTimeout).connectTimeout(Duration.ofSeconds(5)));
    }

    static Status statusOf(CompletableFuture<?> f) throws InterruptedException, TimeoutException {
        return failure(f).status();
    }

    static RemoteMemoryException failure(CompletableFuture<?> f) throws InterruptedException, TimeoutException {
        try {
            f.get(30, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof RemoteMemoryException r) {
                return r;
            }
            throw new AssertionError("failed with something other than RemoteMemoryException", e.getCause());
        }
        throw new AssertionError("expected a failure, the operation succeeded");
    }

    /** The failure's status, checking that its message names what it must (the lease's holder, say). */
    static void assertFails(Status expected, CompletableFuture<?> f, String... named) throws Exception {
        RemoteMemoryException e = failure(f);
        assertEquals(expected, e.status(), e.getMessage());
        for (String n : named) {
            assertTrue(e.getMessage().contains(n), "'" + e.getMessage() + "' should name " + n);
        }
    }

    static <T> T get(CompletableFuture<T> f) throws Exception {
        return f.get(30, TimeUnit.SECONDS);
    }

    static RegionInfo listed(RemoteConnection c, long regionId) throws Exception {
        return get(c.list()).stream().filter(i -> i.descriptor().id() == regionId).findFirst()
                .orElseThrow(() -> new AssertionError("region " + regionId + " is not listed"));
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
        // issue more requests: a transport whose reader can wait for a writer would hang here. 768 MiB go in flight
        // at once and the operation timeout runs from issue, so it is longer than the others here: a loaded machine
        // may take more than two seconds for the last of them, and a deadlock still fails at the timeout.
        try (RemoteConnection c = connect(memserver, TOKEN, Duration.ofSeconds(20)); Arena arena = Arena.ofShared()) {
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
                        all.add(c.read(r, at, dst).whenComplete(
                                (v, e) -> c.read(r, at, dst).whenComplete((v2, e2) -> again.complete(null))));
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

    // ---------------------------------------------------------------------------------------- retag and leases

    @Test
    void retagChangesTheListedTagAndRefusesAVolumeChangeOrAWrongKey() throws Exception {
        try (RemoteConnection a = connect(memserver, TOKEN); RemoteConnection b = connect(memserver, TOKEN);
                Arena arena = Arena.ofShared()) {
            RegionDescriptor r = get(a.allocate(new RegionTag("retag-vol", 4, 1, 1), 1 << 16));
            MemorySegment src = arena.allocate(64).fill((byte) 0x42);
            get(a.write(r, 100, src));

            RegionTag next = new RegionTag("retag-vol", 5, 2, 9);
            RegionDescriptor d = get(a.retag(r, next));
            assertEquals(new RegionDescriptor(r.id(), r.length(), r.key(), next), d, "same region and key, new tag");
            assertEquals(next, listed(b, r.id()).descriptor().tag(), "another client's list shows the new tag");
            assertEquals(0, listed(b, r.id()).descriptor().key(), "listing withholds keys");

            assertFails(Status.BAD_REQUEST, a.retag(d, new RegionTag("another-vol", 5, 2, 10)), "another-vol");
            RegionDescriptor forged = new RegionDescriptor(r.id(), r.length(), r.key() ^ 1, r.tag());
            assertEquals(Status.ACCESS_DENIED, statusOf(b.retag(forged, new RegionTag("retag-vol", 5, 2, 11))));
            assertEquals(next, listed(b, r.id()).descriptor().tag(), "refused retags change nothing");

            MemorySegment dst = arena.allocate(64);
            get(a.read(d, 100, dst));
            assertArrayEquals(bytes(src), bytes(dst), "the data stays");
            // anyone with the key may retag an unleased volume's region
            assertEquals(3, get(b.retag(d, new RegionTag("retag-vol", 5, 2, 3))).tag().generation());
            get(a.release(d));
            assertEquals(Status.NO_SUCH_REGION, statusOf(a.retag(d, next)));
        }
    }

    /**
     * Waits until no released region's memory is still mapped on the shared memserver: until then it counts against
     * the capacity, and a test that reads free bytes would see it go while it runs.
     */
    void awaitNothingLingering() throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (memserver.lingeringBytes() != 0) {
            assertTrue(System.nanoTime() < deadline, memserver.lingeringBytes() + " bytes of released regions are "
                    + "still mapped 30 s on");
            Thread.sleep(50);
        }
    }

    /** A grant as {@code expected} says, with an epoch and a lease id of its own. */
    static void assertLease(Lease expected, Lease actual) {
        assertEquals(expected, new Lease(actual.volume(), actual.owner(), actual.ttlMillis(), actual.tookOver(),
                actual.ownerChanges()));
        assertTrue(actual.hasEpoch(), "every grant has an epoch: " + actual);
        assertNotEquals(Lease.NO_ID, actual.leaseId(), "and a lease id");
    }

    @Test
    void aLeaseIsGrantedRenewedAndGivenBackByItsOwner() throws Exception {
        String vol = "lease-renew";
        try (RemoteConnection a = connect(memserver, TOKEN); RemoteConnection b = connect(memserver, TOKEN)) {
            Lease first = get(a.lease(vol, "owner-a", Duration.ofSeconds(5)));
            assertLease(new Lease(vol, "owner-a", 5000, false, 0), first);
            Lease renewed = get(a.lease(vol, "owner-a", Duration.ofSeconds(7), first.leaseId()));
            assertLease(new Lease(vol, "owner-a", 7000, false, 0), renewed); // renewed, with the new ttl
            assertEquals(first.epoch(), renewed.epoch(), "a renewal keeps the epoch");
            assertEquals(Boolean.TRUE, renewed.continued());
            assertEquals(Status.BAD_REQUEST, statusOf(a.lease(vol, "owner-a", Duration.ZERO)));
            assertEquals(Status.BAD_REQUEST, statusOf(a.lease(vol, "owner-a", Duration.ofMillis(-5))));
            assertEquals(Status.LEASE_HELD, statusOf(b.lease(vol, "owner-b", Duration.ofSeconds(5))),
                    "a refused renewal leaves the lease held");
            get(a.unlease(vol, "owner-a", first.leaseId()));
            Lease passed = get(b.lease(vol, "owner-b", Duration.ofSeconds(5), first.leaseId()));
            // a lease given back passes on at once and is no takeover, but counts as another owner's
            assertLease(new Lease(vol, "owner-b", 5000, false, 1), passed);
            assertTrue(passed.epoch() > first.epoch(), "a new epoch");
            assertEquals(Boolean.TRUE, passed.continued(), "the id is the secret, not the connection");
            get(b.unlease(vol, "owner-b"));
        }
    }

    @Test
    void aSecondOwnerGetsLeaseHeldWithoutLearningWhoHoldsIt() throws Exception {
        String vol = "lease-held";
        try (RemoteConnection a = connect(memserver, TOKEN); RemoteConnection b = connect(memserver, TOKEN)) {
            get(a.lease(vol, "bridge-a", Duration.ofSeconds(30)));
            RemoteMemoryException held = failure(b.lease(vol, "bridge-b", Duration.ofSeconds(30)));
            assertEquals(Status.LEASE_HELD, held.status(), held.getMessage());
            assertTrue(held.getMessage().contains(vol) && held.getMessage().contains(" ms"), held.getMessage());
            assertRevealsNoHolder(held);
            get(b.unlease(vol, "bridge-b")); // not the holder: a no-op
            assertFails(Status.LEASE_HELD, b.lease(vol, "bridge-b", Duration.ofSeconds(30)));
            get(a.lease(vol, "bridge-a", Duration.ofSeconds(30))); // still a's
            get(a.unlease(vol, "bridge-a"));
        }
    }

    /**
     * An error about somebody else's lease must not tell the asker who holds it: the owner string is what a client
     * would present to pass for the holder, and the holder's name and address are nobody else's business.
     */
    static void assertRevealsNoHolder(RemoteMemoryException e) {
        String m = e.getMessage();
        for (String secret : new String[]{"bridge-a", "holder-bridge", "'contract'", " at 127.0.0.1"}) {
            assertFalse(m.contains(secret), "'" + m + "' reveals " + secret);
        }
        assertFalse(m.matches("(?s).*client \\d.*"), "'" + m + "' reveals the holder's client id");
    }

    @Test
    void theHoldersOwnerStringFromAnotherConnectionGetsNeitherTheLeaseNorTheData() throws Exception {
        String vol = "lease-owner-bypass";
        byte[] data = new byte[4096];
        new Random(11).nextBytes(data);
        try (RemoteConnection a = connect(memserver, TOKEN); RemoteConnection b = connect(memserver, TOKEN);
                Arena arena = Arena.ofShared()) {
            get(a.lease(vol, "bridge-a", Duration.ofSeconds(30)));
            RegionDescriptor r = get(a.allocate(new RegionTag(vol, 0, 0, 1), data.length));
            get(a.write(r, 0, arena.allocate(data.length).copyFrom(MemorySegment.ofArray(data))));

            // b knows everything but the key: the token, the owner string, the region's id and tag
            RemoteMemoryException held = failure(b.lease(vol, "bridge-a", Duration.ofSeconds(30)));
            assertEquals(Status.LEASE_HELD, held.status(), held.getMessage());
            assertRevealsNoHolder(held);
            assertFails(Status.ACCESS_DENIED, b.open(r.id()));
            get(b.unlease(vol, "bridge-a")); // not the holder's connection: changes nothing
            assertFails(Status.LEASE_HELD, b.lease(vol, "bridge-a", Duration.ofSeconds(30)));
            assertFails(Status.ACCESS_DENIED, b.open(r.id()));
            RegionDescriptor guessed = listed(b, r.id()).descriptor();
            assertFails(Status.ACCESS_DENIED, b.read(guessed, 0, arena.allocate(data.length)));
            assertFails(Status.ACCESS_DENIED, b.write(guessed, 0, arena.allocate(16)));

            // the holder noticed nothing: its renewal is no takeover, its key still works
            assertFalse(get(a.lease(vol, "bridge-a", Duration.ofSeconds(30))).tookOver());
            MemorySegment dst = arena.allocate(data.length);
            get(a.read(r, 0, dst));
            assertArrayEquals(data, bytes(dst));
            get(a.release(r));
            get(a.unlease(vol, "bridge-a"));
        }
    }

    @Test
    void theSameOwnerOnANewConnectionTakesOverWithNewKeysOnceTheOldOneEnded() throws Exception {
        String vol = "lease-same-owner";
        RegionDescriptor r;
        try (RemoteConnection b = connect(memserver, TOKEN); Arena arena = Arena.ofShared()) {
            try (RemoteConnection a = connect(memserver, TOKEN)) {
                get(a.lease(vol, "bridge-a", Duration.ofSeconds(30)));
                r = get(a.allocate(new RegionTag(vol, 0, 0, 1), 4096));
            }
            Lease lease = awaitLease(b, vol, "bridge-a");
            assertTrue(lease.tookOver(), "a grant to another connection than the holder's is a takeover");
            assertFails(Status.ACCESS_DENIED, b.read(r, 0, arena.allocate(64)));
            RegionDescriptor opened = get(b.open(r.id()));
            assertNotEquals(r.key(), opened.key(), "the takeover rotated the key");
            get(b.read(opened, 0, arena.allocate(64)));
            get(b.release(opened));
            get(b.unlease(vol, "bridge-a"));
        }
    }

    /** Leases {@code vol} for {@code owner} once the memserver has seen the previous holder's connection end. */
    static Lease awaitLease(RemoteConnection c, String vol, String owner) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (true) {
            try {
                return c.lease(vol, owner, Duration.ofSeconds(30)).get(30, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof RemoteMemoryException re && re.status() == Status.LEASE_HELD)
                        || System.nanoTime() > deadline) {
                    throw e;
                }
                Thread.sleep(20);
            }
        }
    }

    @Test
    void aLeaseLongerThanFiveMinutesIsRefusedNamingTheBound() throws Exception {
        String vol = "lease-ttl";
        try (RemoteConnection a = connect(memserver, TOKEN)) {
            assertFails(Status.BAD_REQUEST, a.lease(vol, "squatter", Duration.ofDays(365)), "300000 ms");
            assertFails(Status.BAD_REQUEST, a.lease(vol, "squatter", Duration.ofMinutes(5).plusMillis(1)),
                    "300000 ms");
            assertEquals(300_000, get(a.lease(vol, "squatter", Duration.ofMinutes(5))).ttlMillis());
            get(a.unlease(vol, "squatter"));
        }
    }

    @Test
    void keysHandedOutBeforeAVolumeIsLeasedStopWorkingOnceItIs() throws Exception {
        String vol = "lease-first-grant";
        try (RemoteConnection early = connect(memserver, TOKEN); RemoteConnection owner = connect(memserver, TOKEN);
                Arena arena = Arena.ofShared()) {
            RegionDescriptor r = get(early.allocate(new RegionTag(vol, 0, 0, 1), 4096)); // nobody leases it yet
            get(early.write(r, 0, arena.allocate(64).fill((byte) 9)));
            assertFalse(get(owner.lease(vol, "bridge-o", Duration.ofSeconds(30))).tookOver(),
                    "nobody held it: no takeover");
            assertFails(Status.ACCESS_DENIED, early.write(r, 0, arena.allocate(64)));
            assertFails(Status.ACCESS_DENIED, early.read(r, 0, arena.allocate(64)));
            RegionDescriptor opened = get(owner.open(r.id()));
            MemorySegment dst = arena.allocate(64);
            get(owner.read(opened, 0, dst));
            assertEquals(9, dst.get(ValueLayout.JAVA_BYTE, 63));
            get(owner.unlease(vol, "bridge-o"));
        }
    }

    @Test
    void scratchRegionsGoWithTheirClientAndLeasedVolumesRegionsStay() throws Exception {
        String vol = "scratch-vs-volume";
        long free;
        RegionDescriptor scratch;
        RegionDescriptor kept;
        awaitNothingLingering(); // earlier tests' regions: the free bytes below are this test's alone
        try (RemoteConnection watcher = connect(memserver, TOKEN)) {
            free = get(watcher.info()).freeBytes();
            try (RemoteConnection tool = connect(memserver, TOKEN)) {
                scratch = get(tool.allocate(RegionTag.scratch("scratch-tool"), 1 << 20));
                get(tool.lease(vol, "bridge-s", Duration.ofSeconds(30)));
                kept = get(tool.allocate(new RegionTag(vol, 0, 0, 1), 1 << 20));
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (get(watcher.list()).stream().anyMatch(i -> i.descriptor().id() == scratch.id())
                    && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertTrue(get(watcher.list()).stream().noneMatch(i -> i.descriptor().id() == scratch.id()),
                    "the scratch region outlived its client");
            assertEquals(kept.tag(), listed(watcher, kept.id()).descriptor().tag(), "a leased volume's region is data");
            // Its memory counts against the capacity until it is unmapped: at once here, but on ucx only after the
            // grace period a registration a gone client may still use is kept for where keys are not NIC-enforced.
            awaitNothingLingering();
            assertEquals(free - (1 << 20), get(watcher.info()).freeBytes(),
                    "only the volume's region is still granted once the scratch region is unmapped");
            Lease lease = awaitLease(watcher, vol, "bridge-s2");
            assertTrue(lease.tookOver());
            get(watcher.release(get(watcher.open(kept.id()))));
            get(watcher.unlease(vol, "bridge-s2"));
        }
    }

    @Test
    void closingTheHoldersConnectionFreesTheLeaseAtOnce() throws Exception {
        String vol = "lease-closed";
        RegionDescriptor r;
        byte[] data = new byte[4096];
        new Random(5).nextBytes(data);
        try (Arena arena = Arena.ofShared(); RemoteConnection b = connect(memserver, TOKEN)) {
            try (RemoteConnection a = connect(memserver, TOKEN)) {
                get(a.lease(vol, "bridge-a", Duration.ofMinutes(5)));
                r = get(a.allocate(new RegionTag(vol, 0, 0, 1), data.length));
                get(a.write(r, 0, arena.allocate(data.length).copyFrom(MemorySegment.ofArray(data))));
            }
            // the memserver learns of the close asynchronously (tcp), but long before the 5-minute ttl
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            Lease lease;
            while (true) {
                try {
                    lease = b.lease(vol, "bridge-b", Duration.ofSeconds(30)).get(30, TimeUnit.SECONDS);
                    break;
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof RemoteMemoryException re && re.status() == Status.LEASE_HELD)
                            || System.nanoTime() > deadline) {
                        throw e;
                    }
                    Thread.sleep(20);
                }
            }
            assertTrue(lease.tookOver(), "taking an abandoned lease from another owner is a takeover");
            RegionDescriptor opened = get(b.open(r.id()));
            assertNotEquals(r.key(), opened.key(), "the takeover rotated the key");
            MemorySegment dst = arena.allocate(data.length);
            get(b.read(opened, 0, dst));
            assertArrayEquals(data, bytes(dst));
            get(b.release(opened));
            get(b.unlease(vol, "bridge-b"));
        }
    }

    @Test
    void anExpiredLeaseIsTakenOverAndTheOldHolderIsFencedOff() throws Exception {
        String vol = "lease-expired";
        try (RemoteConnection a = connect(memserver, TOKEN); RemoteConnection b = connect(memserver, TOKEN);
                Arena arena = Arena.ofShared()) {
            Lease first = get(a.lease(vol, "bridge-a", Duration.ofMillis(300)));
            assertFalse(first.tookOver());
            RegionDescriptor r = get(a.allocate(new RegionTag(vol, 0, 0, 1), 1 << 20));
            byte[] data = new byte[1 << 20];
            new Random(7).nextBytes(data);
            get(a.write(r, 0, arena.allocate(data.length).copyFrom(MemorySegment.ofArray(data))));
            Thread.sleep(450); // a does not renew

            Lease taken = get(b.lease(vol, "bridge-b", Duration.ofSeconds(30)));
            assertLease(new Lease(vol, "bridge-b", 30_000, true, 1), taken);

            // the old holder's data operations are fenced off, its connection stays up
            assertFails(Status.ACCESS_DENIED, a.read(r, 0, arena.allocate(4096)));
            assertFails(Status.ACCESS_DENIED, a.write(r, 0, arena.allocate(4096).fill((byte) 1)));
            assertFails(Status.ACCESS_DENIED, a.zero(r, 0, 4096));
            // ... and so are its control operations on the volume
            assertFails(Status.ACCESS_DENIED, a.open(r.id()), vol);
            assertFails(Status.LEASE_HELD, a.lease(vol, "bridge-a", Duration.ofSeconds(30)), vol);
            assertTrue(a.isOpen());

            RegionDescriptor opened = get(b.open(r.id()));
            assertNotEquals(r.key(), opened.key());
            MemorySegment dst = arena.allocate(data.length);
            get(b.read(opened, 0, dst));
            assertArrayEquals(data, bytes(dst), "the new holder reads what the old one wrote");
            get(b.release(opened));
            get(b.unlease(vol, "bridge-b"));
        }
    }

    @Test
    void aNonHolderCannotAllocateOpenRetagOrReleaseRegionsOfALeasedVolume() throws Exception {
        String vol = "lease-guarded";
        try (RemoteConnection holder = connect(memserver, TOKEN); RemoteConnection other = connect(memserver, TOKEN)) {
            get(holder.lease(vol, "holder-bridge", Duration.ofSeconds(30)));
            RegionDescriptor r = get(holder.allocate(new RegionTag(vol, 1, 0, 1), 8192));

            assertRevealsNoHolder(failure(other.allocate(new RegionTag(vol, 2, 0, 1), 8192)));
            assertFails(Status.ACCESS_DENIED, other.allocate(new RegionTag(vol, 2, 0, 1), 8192), vol, " ms");
            assertRevealsNoHolder(failure(other.open(r.id())));
            assertFails(Status.ACCESS_DENIED, other.open(r.id()), vol);
            // even with the right key (leaked, stale): the lease decides
            assertFails(Status.ACCESS_DENIED, other.retag(r, new RegionTag(vol, 1, 0, 2)), vol);
            assertFails(Status.ACCESS_DENIED, other.release(r), vol);
            RegionInfo seen = listed(other, r.id());
            assertEquals(new RegionTag(vol, 1, 0, 1), seen.descriptor().tag(), "nothing changed");
            assertEquals(0, seen.descriptor().key(), "a non-holder cannot learn the key by listing");

            // volumes nobody leases stay usable by everyone
            RegionDescriptor scratch = get(other.allocate(RegionTag.scratch("lease-bystander"), 4096));
            get(other.release(scratch));

            // the holder itself may do all of it
            RegionDescriptor retagged = get(holder.retag(r, new RegionTag(vol, 1, 0, 2)));
            assertEquals(2, get(holder.open(r.id())).tag().generation());
            get(holder.release(retagged));
            get(holder.unlease(vol, "holder-bridge"));
            RegionDescriptor after = get(other.allocate(new RegionTag(vol, 3, 0, 1), 4096));
            get(other.release(after));
        }
    }

    @Test
    void aRevokedRegionIsRefusedToTheClientThatHeldItAndTheClientGoesOn() throws Exception {
        try (RemoteConnection c = connect(memserver, TOKEN); Arena arena = Arena.ofShared()) {
            RegionDescriptor r = get(c.allocate(RegionTag.scratch("revoked"), 1 << 20));
            MemorySegment buf = arena.allocate(64 << 10).fill((byte) 7);
            get(c.write(r, 0, buf)); // ucx: from here on the client holds the region's remote key
            get(c.read(r, 0, buf));
            long free = get(c.info()).freeBytes();
            memserver.revoke(r.id());
            // tcp and local refuse the very next operation; ucx once the client has been told to drop the key (the
            // memserver waits for its answer or disconnects it), so poll for a little while.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            RemoteMemoryException refused = null;
            while (refused == null && System.nanoTime() < deadline) {
                try {
                    get(c.write(r, 0, buf));
                    Thread.sleep(20);
                } catch (ExecutionException e) {
                    refused = assertInstanceOf(RemoteMemoryException.class, e.getCause());
                }
            }
            assertNotNull(refused, "writes to a revoked region still succeed 10 s after the revoke");
            assertEquals(Status.NO_SUCH_REGION, refused.status(), refused.getMessage());
            assertFails(Status.NO_SUCH_REGION, c.read(r, 0, buf));
            assertTrue(get(c.list()).stream().noneMatch(i -> i.descriptor().id() == r.id()), "still listed");
            // Its bytes come back once its memory is unmapped: at once here, on ucx once the clients holding its
            // key have forgotten it and the registration is gone.
            long givenBack = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (get(c.info()).freeBytes() <= free && System.nanoTime() < givenBack) {
                Thread.sleep(20);
            }
            assertTrue(get(c.info()).freeBytes() > free, "the revoked region's bytes were not given back");
            // The connection itself is fine.
            RegionDescriptor next = get(c.allocate(RegionTag.scratch("after-revoke"), 1 << 20));
            get(c.write(next, 0, buf));
            MemorySegment back = arena.allocate(buf.byteSize());
            get(c.read(next, 0, back));
            assertArrayEquals(bytes(buf), bytes(back));
            get(c.release(next));
        }
    }

    @Test
    void infoReflectsAnAllocation() throws Exception {
        awaitNothingLingering(); // earlier tests' regions: the free bytes below are this test's alone
        try (RemoteConnection c = connect(memserver, TOKEN)) {
            ServerInfo before = get(c.info());
            assertEquals(c.server().serverId(), before.serverId());
            assertEquals(CAPACITY, before.capacityBytes());
            long size = 8L << 20;
            RegionDescriptor r = get(c.allocate(RegionTag.scratch("info"), size));
            assertEquals(before.freeBytes() - size, get(c.info()).freeBytes());
            get(c.release(r));
            assertEquals(before.freeBytes(), get(c.info()).freeBytes());
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
    void allocationsNearTwoToTheSixtyThreeAreRefusedSayingWhatWasAsked() throws Exception {
        try (RemoteConnection c = connect(memserver, TOKEN)) {
            long free = get(c.info()).freeBytes();
            for (long size : new long[]{Long.MAX_VALUE, Long.MAX_VALUE - 4094, (1L << 62) + 1, CAPACITY + 1}) {
                RemoteMemoryException e = failure(c.allocate(RegionTag.scratch("huge"), size));
                assertEquals(Status.NO_CAPACITY, e.status(), e.getMessage());
                assertTrue(e.getMessage().contains(Long.toString(size)) && e.getMessage().contains("capacity"),
                        "'" + e.getMessage() + "' should name the size asked for and the capacity");
                assertFalse(e.getMessage().matches(".*-\\d.*"), "a negative size in '" + e.getMessage() + "'");
                assertEquals(free, get(c.info()).freeBytes(), "a refused grant changes nothing");
            }
            for (long size : new long[]{Long.MIN_VALUE, -1, 0}) {
                assertFails(Status.BAD_REQUEST, c.allocate(RegionTag.scratch("huge"), size), "positive");
            }
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
    void anOpcodeTheMemserverDoesNotKnowIsRefusedAndTheConnectionGoesOn() throws Exception {
        // What keeps wire version 1 open to new operations: an older memserver answers them BAD_REQUEST and goes on.
        Assumptions.assumeTrue(memserver.hasWire(), "an in-process provider has no opcodes");
        byte[] token = TOKEN.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        java.nio.ByteBuffer out = java.nio.ByteBuffer.allocate(24 + 2 + token.length + 2 + 24 + 24)
                .order(java.nio.ByteOrder.LITTLE_ENDIAN);
        out.putInt(0x4D524252).putShort((short) 1).putShort((short) 1).putLong(1).putInt(0)
                .putInt(2 + token.length + 2).putShort((short) token.length).put(token).putShort((short) 0);
        out.putInt(0x4D524252).putShort((short) 1).putShort((short) 99).putLong(2).putInt(0).putInt(0); // unknown
        out.putInt(0x4D524252).putShort((short) 1).putShort((short) 19).putLong(3).putInt(0).putInt(0); // FLUSH
        try (Socket s = new Socket(memserver.address().getAddress(), memserver.address().getPort())) {
            s.setSoTimeout(10_000);
            s.getOutputStream().write(out.array());
            DataInputStream in = new DataInputStream(s.getInputStream());
            for (long id = 1; id <= 3; id++) {
                byte[] header = new byte[24];
                in.readFully(header);
                java.nio.ByteBuffer h = java.nio.ByteBuffer.wrap(header).order(java.nio.ByteOrder.LITTLE_ENDIAN);
                byte[] body = new byte[h.getInt(20)];
                in.readFully(body);
                assertEquals(id, h.getLong(8));
                if (id == 2) {
                    assertEquals(Status.BAD_REQUEST.code(), h.getInt(16));
                    String message = new String(body, 2, body.length - 2, java.nio.charset.StandardCharsets.UTF_8);
                    assertTrue(message.contains("OP_99"), message);
                } else {
                    assertEquals(0, h.getInt(16), "reply " + id + " succeeds");
                }
            }
        }
    }

    @Test
    void aWriteTooShortForItsAddressIsRefusedAndTheConnectionGoesOn() throws Exception {
        Assumptions.assumeTrue(memserver.hasWire(), "an in-process provider has no wire to corrupt");
        byte[] token = TOKEN.getBytes(StandardCharsets.UTF_8);
        ByteBuffer out = littleEndian(24 + 2 + token.length + 2 + 24 + 8 + 24);
        out.putInt(0x4D524252).putShort((short) 1).putShort((short) 1).putLong(1).putInt(0)
                .putInt(2 + token.length + 2).putShort((short) token.length).put(token).putShort((short) 0);
        out.putInt(0x4D524252).putShort((short) 1).putShort((short) 17).putLong(2).putInt(0).putInt(8) // WRITE
                .putLong(0x5a5a5a5a5a5a5a5aL); // 8 bytes: not even a region id and key
        out.putInt(0x4D524252).putShort((short) 1).putShort((short) 19).putLong(3).putInt(0).putInt(0); // FLUSH
        try (Socket s = new Socket(memserver.address().getAddress(), memserver.address().getPort())) {
            s.setSoTimeout(10_000);
            s.getOutputStream().write(out.array());
            DataInputStream in = new DataInputStream(s.getInputStream());
            for (long id = 1; id <= 3; id++) {
                byte[] header = new byte[24];
                in.readFully(header);
                ByteBuffer h = ByteBuffer.wrap(header).order(ByteOrder.LITTLE_ENDIAN);
                byte[] body = new byte[h.getInt(20)];
                in.readFully(body);
                assertEquals(id, h.getLong(8));
                if (id == 2) {
                    assertEquals(Status.BAD_REQUEST.code(), h.getInt(16));
                    String message = new String(body, 2, body.length - 2, StandardCharsets.UTF_8);
                    assertTrue(message.contains("no room for its address"), message);
                } else {
                    assertEquals(0, h.getInt(16), "reply " + id + " succeeds");
                }
            }
        }
    }

    /**
     * A memserver's answer (made wrong by a relay: no memserver sends it) that does not fit the request it answers:
     * the client closes the connection, and the operation fails at once rather than wait for a reply that will never
     * come (it was taken off the waiting calls before the reply was checked, and so missed by the close).
     */
    @Test
    void aReplyThatDoesNotFitItsRequestFailsTheOperationPromptly() throws Exception {
        Assumptions.assumeTrue(memserver.hasWire(), "an in-process provider has no wire to corrupt");
        try (InjectingRelay relay = new InjectingRelay(memserver.address());
                RemoteConnection c = connect(relay, TOKEN, Duration.ofMinutes(2))) {
            relay.holdReplies();
            CompletableFuture<Lease> lease = c.lease("misanswered", "owner", Duration.ofSeconds(30));
            InjectingRelay.Request asked = relay.awaitRequest(Message.Lease.class);
            asked.from().inject(withData(new Message.ReadReply(asked.message().id(), 8), 8));
            RemoteMemoryException e = failure(lease, Duration.ofSeconds(10));
            assertEquals(Status.CONNECTION_LOST, e.status(), e.getMessage());
            assertFalse(c.isOpen());
        }
    }

    /** {@code m} as the memserver sends it, and {@code dataBytes} of (zero) data after it. */
    static byte[] withData(Message m, int dataBytes) {
        ByteBuffer head = MessageEncoder.encode(m);
        byte[] b = new byte[head.remaining() + dataBytes];
        head.get(b, 0, head.remaining());
        return b;
    }

    RemoteConnection connect(InjectingRelay relay, String token, Duration operationTimeout)
            throws RemoteMemoryException {
        return provider().connect(new ConnectParams().address(relay.address()).token(token).clientName("contract")
                .lanes(lanes()).callerDriven(callerDriven())
                .operationTimeout(operationTimeout).connectTimeout(Duration.ofSeconds(5)));
    }

    /**
     * How {@code f} failed, within {@code promptly}; waited on with join, in a thread of its own (so a caller-driven
     * one reads its replies).
     */
    static RemoteMemoryException failure(CompletableFuture<?> f, Duration promptly) {
        return assertTimeoutPreemptively(promptly, () -> {
            CompletionException e = assertThrows(CompletionException.class, f::join);
            return assertInstanceOf(RemoteMemoryException.class, e.getCause());
        }, "the operation must fail once its reply turned out wrong, not wait for ever");
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

    /**
     * Clients that leave as soon as they are in, before any data moved: a transport that sets up more than the
     * control connection (UCX's endpoint wire-up) must neither make them wait on the memserver nor let their leaving
     * take it down. Some only connect, some lease, some lease and allocate (which, on ucx, maps the region); eight
     * threads at a time.
     */
    @Test
    void clientsThatLeaveRightAfterConnectingHurtNoOne() throws Exception {
        int clients = 50;
        int threads = 8;
        try (Target m = start(64L << 20); Arena arena = Arena.ofShared()) {
            List<Throwable> errors = java.util.Collections.synchronizedList(new ArrayList<>());
            List<Thread> workers = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                int first = t;
                workers.add(Thread.ofPlatform().start(() -> {
                    for (int i = first; i < clients; i += threads) {
                        String vol = "brief-" + i;
                        try (RemoteConnection c = connect(m, TOKEN)) {
                            if (i % 3 > 0) {
                                get(c.lease(vol, "bridge-" + i, Duration.ofMinutes(1)));
                            }
                            if (i % 3 > 1) {
                                get(c.allocate(new RegionTag(vol, 0, 0, 1), 64 << 10));
                            }
                        } catch (Throwable e) {
                            errors.add(new AssertionError("client " + i + ": " + e, e));
                        }
                    }
                }));
            }
            for (Thread w : workers) {
                w.join(TimeUnit.SECONDS.toMillis(60));
                assertFalse(w.isAlive(), "a client of the storm still runs after 60 s");
            }
            // A window in which nothing may happen, on purpose: what the last of them left in flight is handled after
            // they closed, and the memserver must not die of it. No state says "all handled" (their leases and
            // regions outlive them by design), so the test waits 1 s; alive() below fails if the process is gone,
            // and the client after it fails if the memserver no longer serves.
            Thread.sleep(1000);
            assertTrue(m.alive(), "the memserver died under clients that left right after connecting; its log:\n"
                    + m.logText());
            if (!errors.isEmpty()) {
                throw new AssertionError(errors.size() + " of " + clients + " short-lived clients failed; the "
                        + "first: " + errors.get(0).getMessage(), errors.get(0));
            }
            try (RemoteConnection c = connect(m, TOKEN)) {
                RegionDescriptor r = get(c.allocate(RegionTag.scratch("after-the-storm"), 1 << 20));
                MemorySegment src = arena.allocate(4096).fill((byte) 0x5A);
                get(c.write(r, 8192, src));
                MemorySegment dst = arena.allocate(4096);
                get(c.read(r, 8192, dst));
                assertArrayEquals(bytes(src), bytes(dst));
                get(c.release(r));
            }
            assertTrue(m.alive(), "the memserver died after the storm; its log:\n" + m.logText());
        }
    }

    // ------------------------------------------------------------------------ the same rules on every transport

    @Test
    void zeroGivesTheMemoryBackWhereNoDeviceHoldsIt() throws Exception {
        Assumptions.assumeFalse(deviceHoldsRegisteredMemory(), "an RDMA NIC holds this memserver's registered "
                + "memory: ZERO fills it instead of giving its pages back");
        long mib = 1 << 20;
        try (RemoteConnection c = connect(memserver, TOKEN); Arena arena = Arena.ofShared()) {
            RegionDescriptor r = get(c.allocate(RegionTag.scratch("zero-gives-back"), 4 * mib));
            get(c.write(r, mib, arena.allocate(mib).fill((byte) 0x6B)));
            get(c.flush());
            long written = memserver.residentBytes();
            assertTrue(written >= mib, "1 MiB written backs " + written + " bytes");
            get(c.zero(r, mib, mib));
            long zeroed = memserver.residentBytes();
            assertTrue(written - zeroed >= mib, "ZERO of 1 MiB that was written gave back " + (written - zeroed)
                    + " bytes (the memserver's regions held " + written + " bytes before, " + zeroed + " after)");
            MemorySegment back = arena.allocate(mib).fill((byte) 1);
            get(c.read(r, mib, back));
            assertArrayEquals(new byte[(int) mib], bytes(back), "a zeroed range reads as zeroes");
            get(c.release(r));
        }
    }

    /** Ways to be turned away before admission, and the reason the memserver counts for each. */
    enum Refusal {
        WRONG_TOKEN("token"), GARBAGE("malformed"), MALFORMED_GREETING("malformed"), REQUEST_BEFORE_GREETING(
                "malformed"), OTHER_VERSION("version"), HELLO_TIMEOUT("hello_timeout");

        final String reason;

        Refusal(String reason) {
            this.reason = reason;
        }
    }

    @ParameterizedTest
    @EnumSource(Refusal.class)
    void aPeerTurnedAwayIsCountedOnceForItsReason(Refusal refusal) throws Exception {
        Assumptions.assumeTrue(memserver.hasWire(), "an in-process provider has no listener to turn peers away");
        if (refusal == Refusal.HELLO_TIMEOUT) {
            try (Target m = start(64L << 20, Duration.ofSeconds(1))) {
                assertCountedOnce(m, refusal);
            }
        } else {
            assertCountedOnce(memserver, refusal);
        }
    }

    private void assertCountedOnce(Target m, Refusal refusal) throws Exception {
        Map<String, Long> before = m.refused();
        byte[] token = TOKEN.getBytes(StandardCharsets.UTF_8);
        switch (refusal) {
            case WRONG_TOKEN -> assertEquals(Status.AUTH_FAILED,
                    assertThrows(RemoteMemoryException.class, () -> connect(m, "not-the-token")).status());
            case GARBAGE -> sendAndAwaitClose(m, "GET / HTTP/1.1\r\nHost: memserver\r\n\r\n"
                    .getBytes(StandardCharsets.US_ASCII));
            case MALFORMED_GREETING -> sendAndAwaitClose(m, littleEndian(24 + 4)
                    .putInt(0x4D524252).putShort((short) 1).putShort((short) 1).putLong(1).putInt(0).putInt(4)
                    .putShort((short) 200).putShort((short) 0).array()); // a token longer than the HELLO
            case REQUEST_BEFORE_GREETING -> sendAndAwaitClose(m, littleEndian(24)
                    .putInt(0x4D524252).putShort((short) 1).putShort((short) 9).putLong(1).putInt(0).putInt(0)
                    .array()); // INFO
            case OTHER_VERSION -> sendAndAwaitClose(m, littleEndian(24 + 2 + token.length + 2)
                    .putInt(0x4D524252).putShort((short) 2).putShort((short) 1).putLong(1).putInt(0)
                    .putInt(2 + token.length + 2).putShort((short) token.length).put(token).putShort((short) 0)
                    .array());
            case HELLO_TIMEOUT -> sendAndAwaitClose(m, new byte[0]); // says nothing at all
        }
        // Counted before the memserver closed the connection; a second count would follow shortly if at all, so after
        // the first count a window of 500 ms in which nothing may move (a negative check: assertEquals below fails on
        // a second count or a count under another reason).
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (m.refused().equals(before) && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        Thread.sleep(500);
        Map<String, Long> after = m.refused();
        Map<String, Long> moved = new java.util.TreeMap<>();
        after.forEach((reason, n) -> {
            long d = n - before.getOrDefault(reason, 0L);
            if (d != 0) {
                moved.put(reason, d);
            }
        });
        assertEquals(Map.of(refusal.reason, 1L), moved, refusal + ": the refused counters moved by " + moved
                + " (before " + before + ", after " + after + ")");
    }

    static ByteBuffer littleEndian(int size) {
        return ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN);
    }

    /** Sends {@code bytes} on a new connection and waits, up to 30 s, for the memserver to close it. */
    static void sendAndAwaitClose(Target m, byte[] bytes) throws Exception {
        try (Socket s = new Socket(m.address().getAddress(), m.address().getPort())) {
            s.setSoTimeout(30_000);
            s.getOutputStream().write(bytes);
            s.getOutputStream().flush();
            try {
                while (s.getInputStream().read() >= 0) {
                    // whatever it answers before closing
                }
            } catch (java.net.SocketException reset) {
                // closed with a reset: closed all the same
            }
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
