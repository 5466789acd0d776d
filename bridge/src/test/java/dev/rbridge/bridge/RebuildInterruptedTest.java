package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.SlabState;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.nbd.device.BlockDeviceException;
import dev.rbridge.nbd.protocol.Errno;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.tcp.TcpProvider;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.Timeout;

import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Random;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A rebuild interrupted mid-copy. The slab's replicas were on A and B; A died; the copy from B goes to C through a
 * relay that slows every transfer, so the test acts while it is under way. When the target dies, the half-built copy
 * never counts: the rebuild starts again elsewhere and the new replica holds every byte. When the source dies, the
 * slab is lost (EIO) rather than served from the half-built copy, and it is served again, whole, once the source is
 * back. Memservers in this JVM over tcp.
 */
@Tag("fault")
@Timeout(120)
class RebuildInterruptedTest {
    private static final long MIB = 1 << 20;
    private static final long SLAB = 8 * MIB;
    private static final Duration WAIT = Duration.ofSeconds(30);
    @RegisterExtension
    final InJvmCluster cluster = new InJvmCluster();

    private Memserver memserver(long capacity) throws Exception {
        return cluster.memserver(capacity);
    }

    /** A memserver with room for one slab, all of it taken by a scratch region until the hoard is closed. */
    private record Full(Memserver memserver, RemoteConnection hoard) {
    }

    private Full full() throws Exception {
        Memserver m = memserver(SLAB + MIB);
        RemoteConnection hoard = cluster.open(new TcpProvider().connect(new ConnectParams().address(m.address())
                .connectTimeout(Duration.ofSeconds(5)).operationTimeout(Duration.ofSeconds(5))));
        hoard.allocate(RegionTag.scratch("hoard"), SLAB).get(5, TimeUnit.SECONDS);
        return new Full(m, hoard);
    }

    private Bridge bridge(InetSocketAddress... memservers) {
        BridgeConfig.Builder b = BridgeConfig.builder().transport("tcp").startWait(Duration.ofSeconds(1))
                .operationTimeout(Duration.ofSeconds(2)).leaseTtl(Duration.ofSeconds(3)).rebuildChunk(256 << 10);
        for (InetSocketAddress m : memservers) {
            b.memserver(m);
        }
        b.volume(new VolumeSpec("disk", SLAB, SLAB, 2, false, 1, ""));
        return cluster.bridge(b.build());
    }

    private static byte[] model() {
        byte[] b = new byte[(int) SLAB];
        new Random(25).nextBytes(b);
        return b;
    }

    private static byte[] read(Volume v) throws Exception {
        ByteBuffer b = ByteBuffer.allocateDirect((int) SLAB);
        v.read(0, b).get(20, TimeUnit.SECONDS);
        byte[] out = new byte[(int) SLAB];
        b.get(out);
        return out;
    }

    private static void await(BooleanSupplier condition, Supplier<String> what) throws InterruptedException {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, () -> "not within " + WAIT + ": " + what.get());
            Thread.sleep(10);
        }
    }

    private static String label(Bridge b, InetSocketAddress address) {
        return b.memservers().stream().filter(l -> l.address().equals(address)).findFirst()
                .map(MemserverLink::label).orElseThrow();
    }

    private static boolean on(Volume v, String label) {
        return v.slabStatus(0).replicas().stream().anyMatch(r -> r.startsWith(label + "#"));
    }

    /** Until some chunks are copied to {@code target}, and not all: the copy is under way. */
    private static void awaitMidCopy(Volume v, String target) throws InterruptedException {
        await(() -> {
            Volume.SlabStatus s = v.slabStatus(0);
            return s.building() != null && s.building().startsWith(target + "#") && s.rebuildCopiedBytes() > 0;
        }, () -> "a copy onto " + target + " under way: " + v.slabStatus(0));
        Volume.SlabStatus s = v.slabStatus(0);
        assertTrue(s.rebuildCopiedBytes() < SLAB, "the copy finished before the test could interrupt it: " + s);
    }

    @Test
    void aTargetThatDiesMidCopyIsGivenUpAndTheRebuildCompletesElsewhereWithEveryByte() throws Exception {
        Memserver a = memserver(64 * MIB);
        Memserver b = memserver(64 * MIB);
        Full c = full();
        Full d = full();
        MemserverDrainTest.DelayRelay slowC =
                cluster.open(new MemserverDrainTest.DelayRelay(c.memserver().address(), 30));
        Bridge bridge = bridge(a.address(), b.address(), slowC.address(), d.memserver().address());
        Volume v = bridge.volume("disk");
        byte[] model = model();
        v.write(0, ByteBuffer.allocateDirect(model.length).put(model).flip(), false).get(20, TimeUnit.SECONDS);
        String la = label(bridge, a.address());
        String lb = label(bridge, b.address());
        String lc = label(bridge, slowC.address());
        String ld = label(bridge, d.memserver().address());
        assertTrue(on(v, la) && on(v, lb), "placed on A and B, the only ones with room: " + v.slabStatus(0));

        a.close();
        await(() -> v.slabStatus(0).state() == SlabState.DEGRADED, () -> v.slabStatus(0).toString());
        c.hoard().close(); // room on C (slow) only: the copy goes there
        awaitMidCopy(v, lc);
        c.memserver().close(); // the target dies mid-copy
        await(() -> bridge.rebuilder().copiesFailed() >= 1, () -> "the copy onto dead C given up: "
                + v.slabStatus(0));
        assertTrue(v.slabStatus(0).state() != SlabState.HEALTHY && !on(v, lc),
                "a half-built copy never joins: " + v.slabStatus(0));
        assertArrayEquals(model, read(v), "B serves every byte meanwhile");

        d.hoard().close(); // room on D: the rebuild starts again there
        await(() -> v.slabStatus(0).state() == SlabState.HEALTHY, () -> v.slabStatus(0).toString());
        assertTrue(on(v, lb) && on(v, ld), "rebuilt onto D: " + v.slabStatus(0));
        // D's copy alone must hold every byte: with B gone, it is what is read.
        b.close();
        await(() -> !on(v, lb), () -> v.slabStatus(0).toString());
        assertArrayEquals(model, read(v), "the copy rebuilt after the interrupted one is whole");
    }

    @Test
    void aSourceThatDiesMidCopyLeavesTheSlabLostNotServedFromTheHalfCopyUntilItIsBack() throws Exception {
        Memserver a = memserver(64 * MIB);
        Memserver b = memserver(64 * MIB);
        Full c = full();
        PartitionRelay toB = cluster.open(new PartitionRelay(b.address()));
        MemserverDrainTest.DelayRelay slowC =
                cluster.open(new MemserverDrainTest.DelayRelay(c.memserver().address(), 30));
        Bridge bridge = bridge(a.address(), toB.address(), slowC.address());
        Volume v = bridge.volume("disk");
        byte[] model = model();
        v.write(0, ByteBuffer.allocateDirect(model.length).put(model).flip(), false).get(20, TimeUnit.SECONDS);
        String la = label(bridge, a.address());
        String lb = label(bridge, toB.address());
        String lc = label(bridge, slowC.address());
        assertTrue(on(v, la) && on(v, lb), "placed on A and B, the only ones with room: " + v.slabStatus(0));

        a.close();
        await(() -> v.slabStatus(0).state() == SlabState.DEGRADED, () -> v.slabStatus(0).toString());
        c.hoard().close();
        awaitMidCopy(v, lc);
        toB.partition(); // the source goes away mid-copy (its memory, with every byte, stays)

        ExecutionException e = assertThrows(ExecutionException.class, () -> read(v),
                "a read answered with no whole replica left");
        assertEquals(Errno.EIO, assertInstanceOf(BlockDeviceException.class, e.getCause()).errno());
        // The read failed because B's replica did: from then on the slab is lost until B is back, whatever C holds.
        await(() -> {
            assertEquals(SlabState.LOST, v.slabStatus(0).state(), "the half-built copy was taken for a replica: "
                    + v.slabStatus(0));
            return InJvmCluster.regionsOfSlab0(c.memserver()) == 0;
        }, () -> "the half-built copy on C is released: " + v.slabStatus(0));
        ExecutionException again = assertThrows(ExecutionException.class, () -> read(v));
        assertEquals(Errno.EIO, assertInstanceOf(BlockDeviceException.class, again.getCause()).errno());

        toB.heal(); // B comes back with every byte: served again, then copied whole onto C
        await(() -> v.slabStatus(0).state() != SlabState.LOST, () -> v.slabStatus(0).toString());
        assertArrayEquals(model, read(v), "B's copy serves again");
        await(() -> v.slabStatus(0).state() == SlabState.HEALTHY, () -> v.slabStatus(0).toString());
        assertTrue(on(v, lc), "rebuilt onto C: " + v.slabStatus(0));
    }
}
