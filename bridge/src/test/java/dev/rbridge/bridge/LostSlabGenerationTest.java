package dev.rbridge.bridge;

import dev.rbridge.bridge.volume.SlabState;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.nbd.device.BlockDeviceException;
import dev.rbridge.nbd.protocol.Errno;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.concurrent.ExecutionException;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A slab whose replicas failed one after the other is lost; the replica that failed first holds an older generation
 * (it missed the writes acknowledged by the other one alone). When that older replica comes back first, the bridge
 * must refuse it (the slab stays lost, with EIO, and the stale region is released) rather than serve data older than
 * acknowledged writes; when the replica that failed last comes back, the slab is served again with the newest data.
 * Memservers in this JVM over tcp, each behind a relay that partitions it as a network would.
 */
@Tag("fault")
@Timeout(120)
class LostSlabGenerationTest {
    private static final long MIB = 1 << 20;
    private static final Duration WAIT = Duration.ofSeconds(30);
    @RegisterExtension
    final InJvmCluster cluster = new InJvmCluster();

    private Memserver memserver() throws Exception {
        return cluster.memserver(64 * MIB);
    }

    private static void await(BooleanSupplier condition, Duration timeout, java.util.function.Supplier<String> what)
            throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, () -> "not within " + timeout + ": " + what.get());
            Thread.sleep(50);
        }
    }

    @Test
    void anOlderGenerationReplicaOfALostSlabIsRefusedAndTheNewestIsTakenBack() throws Exception {
        Memserver a = memserver();
        Memserver b = memserver();
        PartitionRelay toA = cluster.open(new PartitionRelay(a.address()));
        PartitionRelay toB = cluster.open(new PartitionRelay(b.address()));
        // Two memservers for two replicas: nowhere to rebuild, so the failures below leave the slab as they make it.
        Bridge bridge = cluster.bridge(BridgeConfig.builder().transport("tcp").startWait(Duration.ofSeconds(1))
                .operationTimeout(Duration.ofSeconds(1)).leaseTtl(Duration.ofSeconds(3)).rebuildChunk(256 << 10)
                .memserver(toA.address()).memserver(toB.address())
                .volume(new VolumeSpec("disk", 8 * MIB, 4 * MIB, 2, false, 1, "")).build());
        Volume v = bridge.volume("disk");
        byte[] old = VolumeBytes.filled('o');
        byte[] newest = VolumeBytes.filled('n');
        VolumeBytes.write(v, old);
        assertEquals(2, v.slabStatus(0).replicas().size(), v.slabStatus(0).toString());
        long first = v.slabStatus(0).generation();

        // A goes away: the next write is acknowledged by B alone, at a newer generation A never sees.
        toA.partition();
        VolumeBytes.write(v, newest);
        await(() -> v.slabStatus(0).state() == SlabState.DEGRADED && v.slabStatus(0).replicas().size() == 1,
                WAIT, () -> v.slabStatus(0).toString());
        assertTrue(v.slabStatus(0).generation() > first, "the survivor serves a newer generation: " + v.slabStatus(0));
        assertEquals(1, InJvmCluster.regionsOfSlab0(a), "A still holds its (now stale) copy");

        // B goes away too: the slab is lost.
        toB.partition();
        ExecutionException lost = assertThrows(ExecutionException.class, () -> VolumeBytes.read(v, 4096));
        assertEquals(Errno.EIO, assertInstanceOf(BlockDeviceException.class, lost.getCause()).errno());
        await(() -> v.slabStatus(0).state() == SlabState.LOST, WAIT, () -> v.slabStatus(0).toString());

        // A comes back first, holding the older generation: the bridge reconnects, lists A's regions, and must
        // release that copy instead of taking it back. Its release is the sign the bridge has judged it.
        toA.heal();
        await(() -> {
            assertEquals(SlabState.LOST, v.slabStatus(0).state(), "an older generation was taken back: "
                    + v.slabStatus(0));
            return InJvmCluster.regionsOfSlab0(a) == 0;
        }, WAIT, () -> "A's stale copy of slab 0 was neither released nor taken back; slab 0: " + v.slabStatus(0)
                + "; A: " + InJvmCluster.link(bridge, toA.address()).state());
        ExecutionException stillLost = assertThrows(ExecutionException.class, () -> VolumeBytes.read(v, 4096),
                "a read served data older than an acknowledged write");
        assertEquals(Errno.EIO, assertInstanceOf(BlockDeviceException.class, stillLost.getCause()).errno());

        // B comes back with the newest generation: taken back, and it reads what was last acknowledged.
        toB.heal();
        await(() -> v.slabStatus(0).state() != SlabState.LOST, WAIT, () -> v.slabStatus(0).toString());
        assertArrayEquals(newest, VolumeBytes.read(v, newest.length));
    }
}
