package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.memservers.RemoteOpMetrics;
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
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The allocation manifest against real memservers in this JVM (local transport): what it writes into its copies, what
 * a restarted bridge reads back from them, and when recording a slab must fail.
 */
@Timeout(60)
class AllocationManifestTest {
    private static final String VOLUME = "disk";
    private final List<AutoCloseable> open = new ArrayList<>();

    @AfterEach
    void tearDown() throws Exception {
        for (AutoCloseable c : open.reversed()) {
            c.close();
        }
    }

    /** One memserver as the manifest sees it: its link, a connection to it and a manifest-sized region there. */
    private record Copy(Memserver server, MemserverLink link, RemoteConnection connection, RegionDescriptor region) {
        long[] words() throws Exception {
            ByteBuffer b = ByteBuffer.allocateDirect((int) region.length());
            connection.read(region, 0, MemorySegment.ofBuffer(b)).get(5, TimeUnit.SECONDS);
            b.order(ByteOrder.LITTLE_ENDIAN);
            long[] out = new long[b.capacity() / 8];
            for (int i = 0; i < out.length; i++) {
                out[i] = b.getLong(i * 8);
            }
            return out;
        }
    }

    private Copy copy(AllocationManifest m) throws Exception {
        Memserver server = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 1 << 20, null,
                "local"));
        open.add(server);
        RemoteConnection c = Providers.byName("local").connect(new ConnectParams().address(server.address()));
        open.add(c::close);
        RegionDescriptor region = c.allocate(AllocationManifest.tag(VOLUME), m.regionLength()).get(5, TimeUnit.SECONDS);
        return new Copy(server, new MemserverLink(server.address(), label -> RemoteOpMetrics.NONE), c, region);
    }

    private static void adopt(AllocationManifest m, Copy copy) throws Exception {
        m.adopt(copy.link(), copy.connection(), copy.region()).get(5, TimeUnit.SECONDS);
    }

    private static Set<Integer> allocated(AllocationManifest m, int slabs) {
        Set<Integer> out = new TreeSet<>();
        for (int i = 0; i < slabs; i++) {
            if (m.allocated(i)) {
                out.add(i);
            }
        }
        return out;
    }

    @Test
    void theManifestIsATaggedRegionOfWholePages() {
        assertTrue(AllocationManifest.isManifest(AllocationManifest.tag(VOLUME)));
        assertEquals(AllocationManifest.SLAB, AllocationManifest.tag(VOLUME).slab());
        assertEquals(VOLUME, AllocationManifest.tag(VOLUME).volume());
        assertFalse(AllocationManifest.isManifest(new RegionTag(VOLUME, 0, 0, 1)), "slab 0");
        assertEquals(4096, new AllocationManifest(VOLUME, 1).regionLength());
        assertEquals(4096, new AllocationManifest(VOLUME, 4096 * 8).regionLength(), "one bit a slab: one full page");
        assertEquals(8192, new AllocationManifest(VOLUME, 4096 * 8 + 1).regionLength(), "one bit more: two pages");
    }

    @Test
    void aSlabIsInEveryCopyWhenItsRecordCompletesAndARestartReadsItBack() throws Exception {
        int slabs = 200;
        AllocationManifest m = new AllocationManifest(VOLUME, slabs);
        Copy a = copy(m);
        Copy b = copy(m);
        adopt(m, a);
        adopt(m, b);
        for (int slab : new int[]{0, 63, 64, 199}) {
            m.record(slab).get(5, TimeUnit.SECONDS);
        }
        for (Copy c : List.of(a, b)) {
            long[] words = c.words();
            assertEquals(1L | 1L << 63, words[0], "slabs 0 and 63 in the first word");
            assertEquals(1L, words[1], "slab 64");
            assertEquals(0L, words[2]);
            assertEquals(1L << 7, words[3], "slab 199");
            for (int i = 4; i < words.length; i++) {
                assertEquals(0L, words[i], "word " + i);
            }
        }
        AllocationManifest restarted = new AllocationManifest(VOLUME, slabs);
        assertEquals(Set.of(), allocated(restarted, slabs), "a new manifest knows of no slab");
        restarted.merge(b.connection(), b.region());
        assertEquals(Set.of(0, 63, 64, 199), allocated(restarted, slabs));
    }

    /**
     * A volume that was larger, started smaller (--allow-shrink) and then grown again: slabs past the shrunk end were
     * discarded, so their old bits must neither be taken in at the start nor left in the copies, or the grown volume
     * would call those never-written slabs lost (EIO) instead of zeroes.
     */
    @Test
    void bitsPastTheEndAreDroppedAtStartAndInTheCopiesSoAGrownVolumeDoesNotCallThemLost() throws Exception {
        AllocationManifest large = new AllocationManifest(VOLUME, 200);
        Copy a = copy(large);
        adopt(large, a);
        for (int slab : new int[]{5, 70, 150}) {
            large.record(slab).get(5, TimeUnit.SECONDS);
        }
        AllocationManifest shrunk = new AllocationManifest(VOLUME, 100); // the same word holds slabs 64..127
        shrunk.merge(a.connection(), a.region());
        assertEquals(Set.of(5, 70), allocated(shrunk, 100));
        adopt(shrunk, a); // what the bridge's start does with every copy
        assertTrue(shrunk.growTo(200));
        assertEquals(Set.of(5, 70), allocated(shrunk, 200), "slab 150 was discarded with the shrink");
        assertEquals(0L, a.words()[2], "the copy no longer holds slab 150's old bit");
        AllocationManifest restarted = new AllocationManifest(VOLUME, 200);
        restarted.merge(a.connection(), a.region());
        assertEquals(Set.of(5, 70), allocated(restarted, 200), "nor does a restart at the grown size find it");
    }

    @Test
    void copiesAreMergedAndAnAdoptedCopyGetsTheWholeBitmap() throws Exception {
        int slabs = 130;
        AllocationManifest first = new AllocationManifest(VOLUME, slabs);
        Copy a = copy(first);
        adopt(first, a);
        first.record(1).get(5, TimeUnit.SECONDS);
        first.record(2).get(5, TimeUnit.SECONDS);
        AllocationManifest second = new AllocationManifest(VOLUME, slabs); // wrote elsewhere while a was away
        Copy b = copy(second);
        adopt(second, b);
        second.record(129).get(5, TimeUnit.SECONDS);

        AllocationManifest restarted = new AllocationManifest(VOLUME, slabs);
        restarted.merge(a.connection(), a.region());
        restarted.merge(b.connection(), b.region());
        assertEquals(Set.of(1, 2, 129), allocated(restarted, slabs), "the copies' bits ORed");

        Copy c = copy(restarted);
        adopt(restarted, c);
        AllocationManifest fromC = new AllocationManifest(VOLUME, slabs);
        fromC.merge(c.connection(), c.region());
        assertEquals(Set.of(1, 2, 129), allocated(fromC, slabs), "a copy adopted later holds every bit");
    }

    @Test
    void aForgottenCopyIsNoLongerWritten() throws Exception {
        AllocationManifest m = new AllocationManifest(VOLUME, 64);
        Copy a = copy(m);
        Copy b = copy(m);
        adopt(m, a);
        adopt(m, b);
        m.forget(b.link());
        m.record(5).get(5, TimeUnit.SECONDS);
        assertEquals(1L << 5, a.words()[0]);
        assertEquals(0L, b.words()[0], "written after its memserver was forgotten");
    }

    @Test
    void recordingFailsOnlyWhenNoCopyTookTheBit() throws Exception {
        AllocationManifest nowhere = new AllocationManifest(VOLUME, 64);
        ExecutionException none = assertThrows(ExecutionException.class,
                () -> nowhere.record(1).get(5, TimeUnit.SECONDS));
        assertInstanceOf(IllegalStateException.class, none.getCause());
        assertTrue(none.getCause().getMessage().contains("no memserver holds the allocation manifest of volume disk"),
                none.getCause().getMessage());

        AllocationManifest m = new AllocationManifest(VOLUME, 64);
        Copy a = copy(m);
        Copy b = copy(m);
        adopt(m, a);
        adopt(m, b);
        assertTrue(a.server().revoke(a.region().id()), "revoked");
        m.record(2).get(5, TimeUnit.SECONDS); // b took it
        assertEquals(1L << 2, b.words()[0]);

        assertTrue(b.server().revoke(b.region().id()), "revoked");
        assertThrows(ExecutionException.class, () -> m.record(3).get(5, TimeUnit.SECONDS),
                "no copy could be written");

        AllocationManifest closed = new AllocationManifest(VOLUME, 64);
        Copy c = copy(closed);
        adopt(closed, c);
        c.connection().close();
        ExecutionException gone = assertThrows(ExecutionException.class,
                () -> closed.record(4).get(5, TimeUnit.SECONDS), "the only copy's connection is closed");
        assertInstanceOf(IllegalStateException.class, gone.getCause());
    }
}
