package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.Bridge;
import dev.rbridge.bridge.BridgeConfig;
import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.memserver.MemserverConfig;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Providers;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The rebuild role against real memservers in this JVM (local transport), driven by a real bridge. Each test starts
 * from one slab whose two replicas sat on memservers A and B; A is gone, and the only other memserver, C, has no room
 * until a scratch region another client holds there is given back, so the test decides when a rebuild can start.
 */
@Timeout(120)
class RebuilderTest {
    private static final long MIB = 1 << 20;
    private static final long SLAB = 4 * MIB;
    private static final int CHUNK = 64 << 10;
    private static final int CHUNKS = (int) (SLAB / CHUNK);
    private final List<AutoCloseable> open = new ArrayList<>();

    @AfterEach
    void tearDown() throws Exception {
        for (AutoCloseable c : open.reversed()) {
            c.close();
        }
    }

    /** The slab's data: chunks 1-3, 5-7, ... 29-31 hold bytes, every other chunk (40 of 64) holds only zeroes. */
    private static byte[] model() {
        byte[] model = new byte[(int) SLAB];
        Random rnd = new Random(17);
        for (int c = 0; c < CHUNKS / 2; c++) {
            if (c % 4 != 0) {
                byte[] chunk = new byte[CHUNK];
                rnd.nextBytes(chunk);
                System.arraycopy(chunk, 0, model, c * CHUNK, CHUNK);
            }
        }
        return model;
    }

    private static final int ZERO_CHUNKS = CHUNKS / 2 + CHUNKS / 8;

    private record Scene(Bridge bridge, Volume volume, Slab slab, byte[] model, Memserver b, Memserver c,
            RemoteConnection hoard) {
        Rebuilder rebuilder() {
            return bridge.rebuilder();
        }

        MemserverLink linkOf(Memserver m) {
            return bridge.memservers().stream().filter(l -> l.address().equals(m.address())).findFirst().orElseThrow();
        }

        /** The regions of the slab on {@code m}, with the tags the memserver holds. */
        List<RegionDescriptor> slabRegions(Memserver m) {
            return m.regions().stream().map(ri -> ri.descriptor())
                    .filter(d -> d.tag().volume().equals("disk") && d.tag().slab() == 0).toList();
        }
    }

    private Memserver memserver(long capacity) throws Exception {
        Memserver m = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), capacity, null,
                "local"));
        open.add(m);
        return m;
    }

    /** A, B and C up, C kept full by a scratch region; the slab written onto A and B; A closed; the slab degraded. */
    private Scene degradedWithNoRoomToRebuild() throws Exception {
        Memserver a = memserver(64 * MIB);
        Memserver b = memserver(64 * MIB);
        Memserver c = memserver(SLAB + MIB);
        RemoteConnection hoard = Providers.byName("local").connect(new ConnectParams().address(c.address()));
        open.add(hoard::close);
        hoard.allocate(RegionTag.scratch("hoard"), SLAB).get(5, TimeUnit.SECONDS);

        BridgeConfig config = BridgeConfig.builder().transport("local").startWait(Duration.ZERO)
                .operationTimeout(Duration.ofSeconds(2)).rebuildChunk(CHUNK)
                .memserver(a.address()).memserver(b.address()).memserver(c.address())
                .volume(new VolumeSpec("disk", SLAB, SLAB, 2, false, 1, "")).build();
        Bridge bridge = Bridge.start(config);
        open.add(bridge::close); // closed before the memservers
        Volume v = bridge.volume("disk");
        byte[] model = model();
        v.write(0, ByteBuffer.allocateDirect(model.length).put(model).flip(), false).get(10, TimeUnit.SECONDS);
        Slab s = v.slab(0);
        Scene scene = new Scene(bridge, v, s, model, b, c, hoard);
        assertEquals(Set.of(scene.linkOf(a), scene.linkOf(b)), Set.copyOf(s.set.live.stream().map(Replica::link)
                .toList()), "placed on A and B: C has no room");

        a.close();
        await("the slab to serve from B alone", () -> {
            ReplicaSet set = s.set;
            return set.live.size() == 1 && set.confirmedGeneration() == set.generation;
        });
        assertEquals(SlabState.DEGRADED, v.slabStatus(0).state());
        assertEquals(VolumeState.DEGRADED, v.status().state());
        Thread.sleep(1500); // the health duty offers the slab every second; it cannot be placed
        assertEquals(SlabState.DEGRADED, v.slabStatus(0).state(), "no room anywhere: still degraded");
        assertEquals(List.of(), scene.slabRegions(c), "nothing placed on C");
        assertEquals(0, scene.rebuilder().rebuildsDone());
        assertEquals(0, scene.rebuilder().copiesFailed(), "a slab that cannot be placed is no failed copy");
        return scene;
    }

    private static void await(String what, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "timed out waiting for " + what);
            Thread.sleep(10);
        }
    }

    private static byte[] bytesOf(Replica r) throws Exception {
        ByteBuffer b = ByteBuffer.allocateDirect((int) r.region().length());
        r.connection().read(r.region(), 0, MemorySegment.ofBuffer(b)).get(5, TimeUnit.SECONDS);
        byte[] out = new byte[b.capacity()];
        b.get(out);
        return out;
    }

    /** After the rebuild: B and C live, both holding the slab's bytes, C's copy tagged with the slab's generation. */
    private static void assertRebuiltOntoC(Scene scene) throws Exception {
        ReplicaSet set = scene.slab().set;
        assertEquals(Set.of(scene.linkOf(scene.b()), scene.linkOf(scene.c())),
                Set.copyOf(set.live.stream().map(Replica::link).toList()), "live replicas");
        for (Replica r : set.live) {
            assertArrayEquals(scene.model(), bytesOf(r), "the bytes of " + r.describe());
        }
        List<RegionDescriptor> onC = scene.slabRegions(scene.c());
        assertEquals(1, onC.size(), "C holds the new replica and nothing else of the slab: " + onC);
        assertEquals(set.generation, onC.getFirst().tag().generation(), "tagged with the slab's generation");
    }

    @Test
    void aRebuildCopiesNothingUntilTheWritesBeforeItHaveLandedThenEveryByteWithZeroChunksAsZero() throws Exception {
        Scene scene = degradedWithNoRoomToRebuild();
        Slab s = scene.slab();
        Rebuilder rebuilder = scene.rebuilder();
        // What a write issued against the degraded state and still in flight holds (it would reach B only).
        ReplicaSet before = s.set;
        before.writesInFlight.incrementAndGet();
        scene.hoard().close(); // C has room now

        await("a rebuild onto C to start", () -> s.set.building != null);
        assertEquals(SlabState.REBUILDING, scene.volume().slabStatus(0).state());
        assertEquals(VolumeState.REBUILDING, scene.volume().status().state());
        assertSame(s, rebuilder.current());
        assertEquals(scene.linkOf(scene.c()), s.set.building.link());
        assertEquals(0, scene.slabRegions(scene.c()).getFirst().tag().generation(),
                "a copy under construction is tagged generation 0, never trusted after a restart");
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(500);
        while (System.nanoTime() < until) {
            assertEquals(0, s.rebuildCopied.get(), "a chunk was copied while a write before the rebuild was in flight");
            assertEquals(SLAB, rebuilder.remainingBytes());
            Thread.sleep(10);
        }
        before.writesInFlight.decrementAndGet();

        await("the slab to be healthy", () -> scene.volume().status().state() == VolumeState.HEALTHY
                && rebuilder.current() == null);
        assertRebuiltOntoC(scene);
        assertEquals(1, rebuilder.rebuildsDone());
        assertEquals(0, rebuilder.resyncsDone());
        assertEquals(0, rebuilder.copiesFailed());
        assertEquals(SLAB, rebuilder.copiedBytes());
        assertEquals((long) ZERO_CHUNKS * CHUNK, rebuilder.zeroedBytes(), "every chunk of zeroes went as ZERO");
        assertEquals(0, rebuilder.remainingBytes());
        assertEquals(0, rebuilder.queued());
        long resident = scene.c().stats().residentBytes();
        assertTrue(resident <= (long) (CHUNKS - ZERO_CHUNKS) * CHUNK + MIB,
                "C backs " + resident + " bytes: the data chunks and the manifest, not the zeroes");
    }

    @Test
    void aRebuildWhoseEarlierWritesNeverFinishIsGivenUpCountedAndRetriedUntilItCan() throws Exception {
        Scene scene = degradedWithNoRoomToRebuild();
        Slab s = scene.slab();
        Rebuilder rebuilder = scene.rebuilder();
        ReplicaSet before = s.set;
        before.writesInFlight.incrementAndGet();
        scene.hoard().close();

        // It waits twice the operation timeout for them, then gives the target up, and the next attempt waits again.
        await("a rebuild to be given up", () -> rebuilder.copiesFailed() >= 1);
        assertEquals(0, rebuilder.rebuildsDone());
        assertEquals(0, rebuilder.copiedBytes(), "nothing copied while the writes were in flight");
        assertNotEquals(SlabState.HEALTHY, scene.volume().slabStatus(0).state());
        assertEquals(1, s.set.live.size());

        before.writesInFlight.decrementAndGet();
        await("the slab to be healthy", () -> scene.volume().status().state() == VolumeState.HEALTHY
                && rebuilder.current() == null);
        assertRebuiltOntoC(scene); // the targets given up were released
        assertEquals(1, rebuilder.rebuildsDone());
        assertEquals(SLAB, rebuilder.copiedBytes(), "copied once, by the attempt that finished");
    }

    @Test
    void aFencedVolumeIsNeverRebuilt() throws Exception {
        Scene scene = degradedWithNoRoomToRebuild();
        Slab s = scene.slab();
        Rebuilder rebuilder = scene.rebuilder();
        scene.volume().fence("this test gave the volume to another bridge");
        scene.hoard().close();
        MemserverLink c = scene.linkOf(scene.c());
        await("the bridge to see room on C", () -> c.freeBytes() >= SLAB);

        rebuilder.offer(s); // the health duty no longer offers it: the rebuilder itself must refuse
        await("the rebuilder to take the slab", () -> rebuilder.queued() == 0 && !s.rebuildQueued.get());
        Thread.sleep(1000);
        assertNull(s.set.building);
        assertEquals(List.of(), scene.slabRegions(scene.c()), "nothing placed for a volume this bridge lost");
        assertEquals(0, rebuilder.rebuildsDone());
        assertEquals(0, rebuilder.copiesFailed());
        assertEquals(SlabState.DEGRADED, scene.volume().slabStatus(0).state());
        assertEquals(VolumeState.FENCED, scene.volume().status().state());
    }
}
