package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.rdma.RegionInfo;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.time.Duration;
import java.util.List;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A memserver that comes back holding a copy of a slab at a generation not older than the one the bridge serves: the
 * newer copy of a slab this bridge reattached without it. The bridge cannot tell which copy is right, so it keeps that
 * region as it is, neither serving from it (adopted) nor releasing it (freed), for an operator to judge. Memservers in
 * this JVM over tcp, behind relays that partition them as a network would.
 */
@Tag("fault")
@Timeout(120)
class NewerRegionOnReconnectTest {
    private static final long MIB = 1 << 20;
    private static final Duration WAIT = Duration.ofSeconds(30);
    @RegisterExtension
    final InJvmCluster cluster = new InJvmCluster();

    private static BridgeConfig config(PartitionRelay toA, PartitionRelay toB) {
        // Two memservers for two replicas: nowhere to rebuild, so each failure leaves the slab as it makes it.
        return BridgeConfig.builder().transport("tcp").startWait(Duration.ofSeconds(1))
                .operationTimeout(Duration.ofSeconds(1)).leaseTtl(Duration.ofSeconds(3)).rebuildChunk(256 << 10)
                .memserver(toA.address()).memserver(toB.address())
                .volume(new VolumeSpec("disk", 8 * MIB, 4 * MIB, 2, false, 1, "")).build();
    }

    private static void await(BooleanSupplier condition, Supplier<String> what) throws InterruptedException {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, () -> "not within " + WAIT + ": " + what.get());
            Thread.sleep(50);
        }
    }

    /** The regions of slab 0 of volume {@code disk} that {@code m} holds. */
    private static List<RegionInfo> slab0(Memserver m) {
        return m.regions().stream().filter(r -> r.descriptor().tag().volume().equals("disk")
                && r.descriptor().tag().slab() == 0).toList();
    }

    @Test
    void aRegionAtANewerGenerationFoundOnReconnectIsKeptNotAdoptedNotFreed() throws Exception {
        Memserver a = cluster.memserver(64 * MIB);
        Memserver b = cluster.memserver(64 * MIB);
        PartitionRelay toA = cluster.open(new PartitionRelay(a.address()));
        PartitionRelay toB = cluster.open(new PartitionRelay(b.address()));
        byte[] old = VolumeBytes.filled('o');
        byte[] newer = VolumeBytes.filled('n');

        // The first bridge writes slab 0 on both, then, with B cut off, once more on A alone: A's copy is newer.
        Bridge first = Bridge.start(config(toA, toB));
        try {
            Volume v = first.volume("disk");
            VolumeBytes.write(v, old);
            assertEquals(2, v.slabStatus(0).replicas().size(), v.slabStatus(0).toString());
            toB.partition();
            VolumeBytes.write(v, newer);
            await(() -> v.slabStatus(0).replicas().size() == 1, () -> v.slabStatus(0).toString());
        } finally {
            first.close(); // gives A its lease back; B's lapses, the bridge's connection to it never seen to end
        }
        assertEquals(1, slab0(a).size(), "A holds slab 0");
        long newerGeneration = slab0(a).getFirst().descriptor().tag().generation();
        long regionOnA = slab0(a).getFirst().descriptor().id();
        await(() -> b.leases().stream().noneMatch(l -> l.volume().equals("disk") && l.state().equals("held")),
                () -> "B still leases disk to the first bridge: " + b.leases());

        // The second bridge starts while A is cut off: it serves slab 0 from B's older copy.
        toA.partition();
        toB.heal();
        Bridge second = cluster.bridge(config(toA, toB));
        Volume v = second.volume("disk");
        assertArrayEquals(old, VolumeBytes.read(v, old.length), "served from B's copy");
        long served = v.roster().currentGeneration(0);
        assertTrue(newerGeneration >= served, "the setup must leave A's copy not older than the one served: A has "
                + newerGeneration + ", the bridge serves " + served);

        // A comes back. Once its link is up the bridge has judged every region A listed.
        toA.heal();
        MemserverLink l = InJvmCluster.link(second, toA.address());
        await(() -> l.state() == MemserverLink.State.UP, () -> "A not up again: " + l);
        assertEquals(List.of(regionOnA), slab0(a).stream().map(r -> r.descriptor().id()).toList(),
                "A's newer copy of slab 0 must be kept, not released");
        assertFalse(v.roster().holds(a.serverId(), regionOnA),
                "A's newer copy must not be adopted: " + v.slabStatus(0));
        assertEquals(served, v.roster().currentGeneration(0), "the slab's generation stays: " + v.slabStatus(0));
        assertArrayEquals(old, VolumeBytes.read(v, old.length), "still served from B's copy alone");
    }
}
