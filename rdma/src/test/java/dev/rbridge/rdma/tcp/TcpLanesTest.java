package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteListener;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link TcpLanes} seen from the listening side (in this JVM, so its per-session counters can be read): which lane
 * carries what, and that the lanes live and die as one connection. The contract itself over lanes, against a real
 * memserver, is memserver's TcpLanesProviderContractTest.
 */
@Timeout(60)
class TcpLanesTest {
    static final String TOKEN = "lanes";
    ArenaRegionServiceForTests service;
    RemoteListener listener;

    @BeforeEach
    void start() throws Exception {
        service = new ArenaRegionServiceForTests(TOKEN);
        listener = new TcpProvider().listen(new ListenParams().address(new InetSocketAddress("127.0.0.1", 0)),
                service);
    }

    @AfterEach
    void stop() {
        listener.close();
    }

    RemoteConnection connect(String name, int lanes) throws RemoteMemoryException {
        return new TcpProvider().connect(new ConnectParams().address(listener.address()).token(TOKEN)
                .clientName(name).lanes(lanes).operationTimeout(Duration.ofSeconds(5)));
    }

    List<ArenaRegionServiceForTests.SessionView> clientsNamed(String prefix) {
        return service.sessions().stream().filter(c -> c.name().startsWith(prefix)).toList();
    }

    @Test
    void smallOperationsStayOnTheFirstLaneAndLargeOnesSpreadWithEveryByteIntact() throws Exception {
        try (RemoteConnection c = connect("lanes-test", 3); Arena arena = Arena.ofShared()) {
            List<ArenaRegionServiceForTests.SessionView> lanes = clientsNamed("lanes-test");
            assertEquals(List.of("lanes-test", "lanes-test (lane 2/3)", "lanes-test (lane 3/3)"),
                    lanes.stream().map(ArenaRegionServiceForTests.SessionView::name).toList());
            RegionDescriptor r = c.allocate(RegionTag.scratch("lanes"), 64L << 20).get(10, TimeUnit.SECONDS);
            assertEquals(1, service.sessions().stream().filter(v -> v.regions() == 1).count(),
                    "the region belongs to one session, the first lane's");

            // One at a time: always the first lane.
            MemorySegment small = arena.allocate(4096);
            for (int i = 0; i < 200; i++) {
                small.fill((byte) i);
                c.write(r, (long) i * 4096, small).get(10, TimeUnit.SECONDS);
            }
            List<ConnectionStats.Snapshot> afterSmall = stats("lanes-test");
            assertEquals(200 + 0, afterSmall.get(0).writeOps(), "sequential 4K writes: " + afterSmall);
            assertEquals(0, afterSmall.get(1).writeOps() + afterSmall.get(2).writeOps(), afterSmall.toString());

            // Eight 1 MiB writes issued back to back, six times over: more than one lane carries them.
            Random rnd = new Random(7);
            byte[][] expected = new byte[48][];
            MemorySegment[] sources = new MemorySegment[expected.length];
            for (int i = 0; i < expected.length; i++) {
                expected[i] = new byte[1 << 20];
                rnd.nextBytes(expected[i]);
                sources[i] = arena.allocate(1 << 20);
                MemorySegment.copy(expected[i], 0, sources[i], ValueLayout.JAVA_BYTE, 0, expected[i].length);
            }
            for (int i = 0; i < expected.length; i += 8) {
                List<CompletableFuture<Void>> burst = new ArrayList<>();
                for (int j = i; j < i + 8; j++) {
                    burst.add(c.write(r, (1L << 20) * (1 + j), sources[j]));
                }
                CompletableFuture.allOf(burst.toArray(CompletableFuture[]::new)).get(30, TimeUnit.SECONDS);
            }
            c.flush().get(10, TimeUnit.SECONDS);
            List<ConnectionStats.Snapshot> afterLarge = stats("lanes-test");
            long lanesUsed = afterLarge.stream().filter(s -> s.writeBytes() >= (1 << 20)).count();
            assertTrue(lanesUsed >= 2, "1 MiB QD8 writes should spread over the lanes: " + afterLarge);
            long total = afterLarge.stream().mapToLong(ConnectionStats.Snapshot::writeBytes).sum();
            assertEquals(200L * 4096 + 48L * (1 << 20), total);
            assertEquals(total, c.stats().snapshot().writeBytes(), "the connection's counters cover every lane");

            // Read everything back, also eight at a time over the lanes, and compare.
            for (int i = 0; i < expected.length; i += 8) {
                List<CompletableFuture<Void>> reads = new ArrayList<>();
                List<MemorySegment> dsts = new ArrayList<>();
                for (int j = i; j < i + 8; j++) {
                    MemorySegment dst = arena.allocate(1 << 20);
                    dsts.add(dst);
                    reads.add(c.read(r, (1L << 20) * (1 + j), dst));
                }
                CompletableFuture.allOf(reads.toArray(CompletableFuture[]::new)).get(30, TimeUnit.SECONDS);
                for (int j = i; j < i + 8; j++) {
                    assertArrayEquals(expected[j], dsts.get(j - i).toArray(ValueLayout.JAVA_BYTE), "block " + j);
                }
            }
            MemorySegment back = arena.allocate(4096);
            c.read(r, 199L * 4096, back).get(10, TimeUnit.SECONDS);
            assertEquals((byte) 199, back.get(ValueLayout.JAVA_BYTE, 4095));
        }
        // The listener learns of the close asynchronously, but promptly.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (!clientsNamed("lanes-test").isEmpty() && System.nanoTime() < deadline) {
            Thread.sleep(5);
        }
        assertTrue(clientsNamed("lanes-test").isEmpty(), "closing the connection closes every lane");
    }

    @Test
    void anOperatorCuttingOneLaneClosesTheWholeConnectionAndFreesItsLease() throws Exception {
        try (RemoteConnection c = connect("cut-test", 3); Arena arena = Arena.ofShared()) {
            assertFalse(c.lease("vol", "owner-a", Duration.ofSeconds(30)).get(10, TimeUnit.SECONDS).tookOver());
            RegionDescriptor r = c.allocate(new RegionTag("vol", 0, 0, 1), 16L << 20).get(10, TimeUnit.SECONDS);
            long lastLane = clientsNamed("cut-test").getLast().id();
            assertTrue(service.disconnect(lastLane));

            // Whatever is issued from now on fails promptly, whichever lane it would have taken.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (c.isOpen() && System.nanoTime() < deadline) {
                Thread.sleep(5);
            }
            assertFalse(c.isOpen(), "one lane gone means the connection is gone");
            ExecutionException e = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                    () -> c.write(r, 0, arena.allocate(1 << 20)).get(10, TimeUnit.SECONDS));
            RemoteMemoryException cause = assertInstanceOf(RemoteMemoryException.class, e.getCause());
            assertEquals(Status.CONNECTION_LOST, cause.status(), cause.getMessage());

            // The lease lived on the first lane: another owner gets it at once.
            deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (!clientsNamed("cut-test").isEmpty() && System.nanoTime() < deadline) {
                Thread.sleep(5);
            }
            assertTrue(clientsNamed("cut-test").isEmpty(), service.sessions().toString());
            try (RemoteConnection other = connect("other", 1)) {
                assertTrue(other.lease("vol", "owner-b", Duration.ofSeconds(30)).get(10, TimeUnit.SECONDS)
                        .tookOver(), "granted at once (no LEASE_HELD), as a takeover from the departed owner");
            }
        }
    }

    @Test
    void givingBackALeaseWaitsForTheWritesOnEveryLane() throws Exception {
        // The next owner takes an answered UNLEASE as a clean handover (every write done) and skips its resync. The
        // lease lives on the first lane; here that lane carries 1 MiB of writes and each other lane 32 MiB (a lane
        // with half a megabyte outstanding is passed over), so lane 0 alone would answer long before the rest.
        try (RemoteConnection c = connect("handover", 4); Arena arena = Arena.ofShared()) {
            assertFalse(c.lease("vol", "owner-a", Duration.ofSeconds(30)).get(10, TimeUnit.SECONDS).tookOver());
            RegionDescriptor r = c.allocate(new RegionTag("vol", 0, 0, 1), 97L << 20).get(10, TimeUnit.SECONDS);
            MemorySegment small = arena.allocate(1 << 20);
            MemorySegment large = arena.allocate(32 << 20);
            for (int round = 0; round < 5; round++) {
                small.fill((byte) round);
                large.fill((byte) ~round);
                List<CompletableFuture<Void>> writes = new ArrayList<>();
                writes.add(c.write(r, 0, small));
                for (int i = 0; i < 3; i++) {
                    writes.add(c.write(r, (1L << 20) + ((long) i << 25), large));
                }
                c.unlease("vol", "owner-a").get(30, TimeUnit.SECONDS);
                long unfinished = writes.stream().filter(w -> !w.isDone()).count();
                assertEquals(0, unfinished, "round " + round + ": writes still in flight when UNLEASE was answered");
                for (CompletableFuture<Void> w : writes) {
                    w.get(); // and none of them failed
                }
                assertFalse(c.lease("vol", "owner-a", Duration.ofSeconds(30)).get(10, TimeUnit.SECONDS).tookOver());
            }
            assertTrue(stats("handover").stream().filter(s -> s.writeOps() > 0).count() >= 2,
                    "the writes should have spread over lanes: " + stats("handover"));
        }
    }

    private List<ConnectionStats.Snapshot> stats(String name) {
        return clientsNamed(name).stream().map(ArenaRegionServiceForTests.SessionView::stats).toList();
    }
}
