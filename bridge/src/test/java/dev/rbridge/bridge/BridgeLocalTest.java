package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.SlabState;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.bridge.volume.VolumeState;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.memserver.MemserverConfig;
import dev.rbridge.nbd.device.BlockDeviceException;
import dev.rbridge.nbd.protocol.Errno;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The bridge core against real memservers in this JVM over the {@code local} transport: data integrity against a
 * model, failover, rebuild under concurrent writes, reattach and the ownership lease. (Separate processes and kills
 * are in the serve tests.)
 */
@Timeout(120)
class BridgeLocalTest {
    private static final long MIB = 1 << 20;
    private final List<Memserver> memservers = new ArrayList<>();
    private final List<Bridge> bridges = new ArrayList<>();

    @AfterEach
    void tearDown() {
        bridges.forEach(Bridge::close);
        memservers.forEach(Memserver::close);
    }

    private Memserver memserver(long capacity) throws Exception {
        Memserver m =
                Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), capacity, null, "local"));
        memservers.add(m);
        return m;
    }

    private void threeMemservers() throws Exception {
        for (int i = 0; i < 3; i++) {
            memserver(256 * MIB);
        }
    }

    private Bridge bridge(VolumeSpec... volumes) {
        BridgeConfig.Builder b = BridgeConfig.builder().transport("local").startWait(Duration.ZERO)
                .operationTimeout(Duration.ofSeconds(2)).rebuildChunk(256 << 10);
        memservers.forEach(m -> b.memserver(m.address()));
        for (VolumeSpec v : volumes) {
            b.volume(v);
        }
        Bridge bridge = Bridge.start(b.build());
        bridges.add(bridge);
        return bridge;
    }

    private static VolumeSpec volume(String name, long size, long slab, int replicas) {
        return new VolumeSpec(name, size, slab, replicas, false, 1, "");
    }

    private static void write(Volume v, long offset, byte[] data) throws Exception {
        ByteBuffer b = ByteBuffer.allocateDirect(data.length).put(data).flip();
        v.write(offset, b, false).get(10, TimeUnit.SECONDS);
    }

    private static byte[] read(Volume v, long offset, int length) throws Exception {
        ByteBuffer b = ByteBuffer.allocateDirect(length);
        v.read(offset, b).get(10, TimeUnit.SECONDS);
        byte[] out = new byte[length];
        b.get(out);
        return out;
    }

    private static void await(String what, BooleanSupplier c) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!c.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "timed out waiting for " + what);
            Thread.sleep(20);
        }
    }

    /** Random writes, zeroes and reads in pipelined batches of disjoint ranges, checked against a byte-array model. */
    private static void randomOps(Volume v, byte[] model, Random rnd, int batches) throws Exception {
        int size = model.length;
        for (int batch = 0; batch < batches; batch++) {
            List<CompletableFuture<Void>> pending = new ArrayList<>();
            List<Runnable> checks = new ArrayList<>();
            boolean[] used = new boolean[size / 4096];
            for (int i = 0; i < 16; i++) {
                int len = 1 + rnd.nextInt(rnd.nextBoolean() ? 4096 : 3 * 1024 * 1024);
                int off = rnd.nextInt(size - len);
                int b0 = off / 4096;
                int b1 = (off + len - 1) / 4096;
                boolean clash = false;
                for (int k = b0; k <= b1; k++) {
                    clash |= used[k];
                }
                if (clash) {
                    continue;
                }
                for (int k = b0; k <= b1; k++) {
                    used[k] = true;
                }
                switch (rnd.nextInt(3)) {
                    case 0 -> {
                        byte[] data = new byte[len];
                        rnd.nextBytes(data);
                        System.arraycopy(data, 0, model, off, len);
                        pending.add(v.write(off, ByteBuffer.allocateDirect(len).put(data).flip(), false));
                    }
                    case 1 -> {
                        Arrays.fill(model, off, off + len, (byte) 0);
                        pending.add(rnd.nextBoolean() ? v.writeZeroes(off, len, true, false) : v.trim(off, len, false));
                    }
                    default -> {
                        ByteBuffer dst = ByteBuffer.allocateDirect(len);
                        byte[] expected = Arrays.copyOfRange(model, off, off + len);
                        pending.add(v.read(off, dst));
                        checks.add(() -> {
                            byte[] got = new byte[len];
                            dst.get(got);
                            assertArrayEquals(expected, got, "read at " + off + "+" + len);
                        });
                    }
                }
            }
            CompletableFuture.allOf(pending.toArray(CompletableFuture[]::new)).get(30, TimeUnit.SECONDS);
            checks.forEach(Runnable::run);
        }
        assertArrayEquals(model, read(v, 0, size), "whole volume");
    }

    @Test
    void randomReadsWritesAndZeroesMatchAModelWithTwoReplicas() throws Exception {
        threeMemservers();
        Bridge b = bridge(volume("disk", 24 * MIB, MIB, 2));
        Volume v = b.volume("disk");
        assertArrayEquals(new byte[8192], read(v, 5 * MIB, 8192), "never-written slabs read as zeroes");
        // One allocation manifest per memserver; reads allocate nothing else.
        assertEquals(3, memservers.stream().mapToInt(Memserver::regionCount).sum(), "reads allocate nothing");
        randomOps(v, new byte[24 * (int) MIB], new Random(7), 60);
        Volume.VolumeStatus st = v.status();
        assertEquals(VolumeState.HEALTHY, st.state());
        assertEquals(st.allocated() * 2 + 3, memservers.stream().mapToInt(Memserver::regionCount).sum());
        for (int i = 0; i < v.slabCount(); i++) {
            Volume.SlabStatus s = v.slabStatus(i);
            if (s.state() != SlabState.UNALLOCATED) {
                assertEquals(2, s.replicas().size());
                assertTrue(!s.replicas().get(0).split("#")[0].equals(s.replicas().get(1).split("#")[0]),
                        "two replicas of one slab on one memserver: " + s);
            }
        }
    }

    /** At rest the health duty's work does not grow with the slabs: it walks them only when something changed. */
    @Test
    void atRestTheHealthDutyWalksNoSlabAndAMemserverDeathMakesItLook() throws Exception {
        threeMemservers();
        Bridge b = bridge(volume("disk", 64 * MIB, 2 * MIB, 2));
        Volume v = b.volume("disk");
        write(v, 0, new byte[64 * (int) MIB]);
        await("healthy", () -> v.status().state() == VolumeState.HEALTHY);
        HealthDuty health = b.health();
        await("every memserver up", () -> b.memservers().stream()
                .allMatch(l -> l.state() == MemserverLink.State.UP));
        long settled = health.looks() + 1; // a look that saw every connection up
        await("a look with every memserver up", () -> health.looks() > settled);
        long atRest = health.slabWalks();
        long looks = health.looks();
        await("three more looks", () -> health.looks() >= looks + 3);
        assertEquals(atRest, health.slabWalks(), "the health duty walked the slabs with nothing changed");

        memservers.getFirst().close();
        await("a look after the death, and the rebuild", () -> health.slabWalks() > atRest
                && v.status().state() == VolumeState.HEALTHY
                && b.memservers().getFirst().state() != MemserverLink.State.UP);
    }

    @Test
    void aDeadMemserverDegradesThenRebuildsWhileWritesGoOnAndASecondDeathLosesNothing() throws Exception {
        threeMemservers();
        Bridge b = bridge(volume("disk", 16 * MIB, 2 * MIB, 2));
        Volume v = b.volume("disk");
        byte[] model = new byte[16 * (int) MIB];
        Random rnd = new Random(11);
        rnd.nextBytes(model);
        write(v, 0, model);

        // A writer keeps going through the failure and the rebuild; every write must land on every replica.
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Throwable> writerError = new AtomicReference<>();
        AtomicLong written = new AtomicLong();
        Thread writer = Thread.ofPlatform().start(() -> {
            Random w = new Random(12);
            try {
                while (!stop.get()) {
                    int len = 4096 * (1 + w.nextInt(64));
                    int off = 4096 * w.nextInt((model.length - len) / 4096);
                    byte[] data = new byte[len];
                    w.nextBytes(data);
                    synchronized (model) {
                        System.arraycopy(data, 0, model, off, len);
                    }
                    write(v, off, data);
                    written.incrementAndGet();
                }
            } catch (Throwable t) {
                writerError.set(t);
            }
        });
        await("the writer's first writes", () -> written.get() >= 10 || writerError.get() != null);
        Memserver victim = memservers.getFirst();
        victim.close(); // its regions are gone, its connections fail
        await("degraded then rebuilt", () -> v.status().state() == VolumeState.HEALTHY
                && b.memservers().getFirst().state() != MemserverLink.State.UP);
        long rebuiltAt = written.get();
        await("writes after the rebuild", () -> written.get() >= rebuiltAt + 10 || writerError.get() != null);
        stop.set(true);
        writer.join();
        assertNull(writerError.get(), () -> "writer failed: " + writerError.get());
        assertArrayEquals(model, read(v, 0, model.length), "after failover and rebuild");

        // Kill a second original memserver: every slab still has a copy on the third (the rebuilt ones).
        memservers.get(1).close();
        assertArrayEquals(model, read(v, 0, model.length), "after the second death");
    }

    @Test
    void rebuildingASparseSlabBacksOnlyTheChunksThatHoldData() throws Exception {
        threeMemservers();
        Bridge b = bridge(volume("sparse", 64 * MIB, 4 * MIB, 2));
        Volume v = b.volume("sparse");
        byte[] page = new byte[4096];
        new Random(5).nextBytes(page);
        for (int slab = 0; slab < 16; slab += 2) {
            write(v, slab * 4 * MIB + MIB, page); // one page in every other slab
        }
        memservers.getFirst().close();
        for (int slab = 0; slab < 16; slab += 2) {
            write(v, slab * 4 * MIB + MIB, page); // the same bytes again: each write meets the dead replica
        }
        await("degraded then rebuilt", () -> v.status().state() == VolumeState.HEALTHY
                && b.memservers().getFirst().state() != MemserverLink.State.UP
                && b.rebuilder().queued() == 0 && b.rebuilder().current() == null);
        for (int slab = 0; slab < 16; slab++) {
            byte[] back = read(v, slab * 4 * MIB + MIB, 4096);
            assertArrayEquals(slab % 2 == 0 ? page : new byte[4096], back, "slab " + slab);
        }
        // Eight slabs with two replicas each, one page of data apiece: a rebuilt replica holds the 256 KiB chunk
        // around its page, not 4 MiB of copied zeroes.
        long resident = memservers.get(1).stats().residentBytes() + memservers.get(2).stats().residentBytes();
        assertTrue(resident <= 16 * (256 << 10), "the survivors back " + resident + " bytes after the rebuild");
        long copied = b.rebuilder().copiedBytes();
        assertTrue(copied >= 4 * MIB && copied % (4 * MIB) == 0, "copied " + copied + " bytes: whole slabs");
        long slabs = copied / (4 * MIB);
        assertEquals(copied - slabs * (256 << 10), b.rebuilder().zeroedBytes(),
                "every chunk but the one holding the page went as ZERO");
    }

    @Test
    void withOneReplicaALostSlabFailsWithEioAndOtherVolumesKeepWorking() throws Exception {
        Memserver a = memserver(256 * MIB);
        memserver(256 * MIB);
        Bridge b = bridge(volume("one", 8 * MIB, MIB, 1), volume("two", 8 * MIB, MIB, 1));
        Volume one = b.volume("one");
        Volume two = b.volume("two");
        byte[] data = new byte[8 * (int) MIB];
        new Random(3).nextBytes(data);
        write(one, 0, data);
        write(two, 0, data);
        a.close();
        // Some slab of "one" lived on a; reading everything must fail (EIO) quickly, not hang.
        long t0 = System.nanoTime();
        ExecutionException e = assertThrows(ExecutionException.class, () -> read(one, 0, data.length));
        assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(5), "EIO took too long");
        BlockDeviceException bde = assertInstanceOf(BlockDeviceException.class,
                e.getCause() instanceof java.util.concurrent.CompletionException c ? c.getCause() : e.getCause());
        assertEquals(Errno.EIO, bde.errno());
        // Slabs placed on the surviving memserver still read back.
        int ok = 0;
        for (int s = 0; s < 8; s++) {
            try {
                assertArrayEquals(Arrays.copyOfRange(data, s * (int) MIB, (s + 1) * (int) MIB),
                        read(one, s * MIB, (int) MIB));
                ok++;
            } catch (ExecutionException lost) {
                assertTrue(lost.getMessage().contains("no live replica") || lost.getMessage().contains("failed"),
                        lost.getMessage());
            }
        }
        assertTrue(ok > 0 && ok < 8, "power of two choices spread the slabs over both memservers: " + ok);
        await("volume reported lost", () -> one.status().state() == VolumeState.LOST);
        await("memserver reported down", () -> b.memservers().getFirst().state()
                != MemserverLink.State.UP);
        // The bridge takes the dead memserver's replicas out one slab after another: until it is through, a slab
        // still shown healthy may be one of them.
        String dead = b.memservers().getFirst().label() + "#";
        await("the dead memserver's replicas to be taken out",
                () -> IntStream.range(0, 8)
                        .allMatch(s -> one.slabStatus(s).replicas().stream().noneMatch(r -> r.startsWith(dead))
                                && two.slabStatus(s).replicas().stream().noneMatch(r -> r.startsWith(dead))));
        assertEquals(VolumeState.LOST, two.status().state(),
                "the dead memserver's slabs of the other volume are lost too");
        byte[] fresh = new byte[4096];
        Arrays.fill(fresh, (byte) 9);
        int survivors = 0;
        for (int s = 0; s < 8; s++) {
            if (two.slabStatus(s).state() == SlabState.HEALTHY) {
                write(two, s * MIB, fresh);
                assertArrayEquals(fresh, read(two, s * MIB, 4096));
                survivors++;
            }
        }
        assertTrue(survivors > 0);
    }

    @Test
    void aRestartedBridgeReattachesToTheSameDataAndASecondBridgeIsRefused() throws Exception {
        memserver(256 * MIB);
        memserver(256 * MIB);
        VolumeSpec spec = volume("disk", 8 * MIB, MIB, 2);
        Bridge first = bridge(spec);
        byte[] data = new byte[6 * (int) MIB];
        new Random(5).nextBytes(data);
        write(first.volume("disk"), MIB / 2, data);

        IllegalStateException busy = assertThrows(IllegalStateException.class, () -> bridge(spec));
        assertTrue(busy.getMessage().contains("in use by another bridge"), busy.getMessage());

        first.close();
        bridges.remove(first);
        Bridge second = bridge(spec);
        Volume v = second.volume("disk");
        assertEquals(VolumeState.HEALTHY, v.status().state());
        assertEquals(7, v.status().allocated());
        assertArrayEquals(data, read(v, MIB / 2, data.length));
        assertArrayEquals(new byte[MIB / 2 == 0 ? 1 : (int) (MIB / 2)], read(v, 0, (int) (MIB / 2)));
    }

    @Test
    void aSlabWhoseEveryReplicaVanishedWhileNoBridgeRanFailsWithEioInsteadOfReadingZeroes() throws Exception {
        memserver(256 * MIB);
        memserver(256 * MIB);
        VolumeSpec spec = volume("disk", 8 * MIB, MIB, 1);
        Bridge first = bridge(spec);
        byte[] data = new byte[8 * (int) MIB];
        new Random(9).nextBytes(data);
        write(first.volume("disk"), 0, data);
        first.close();
        bridges.remove(first);
        memservers.getFirst().close(); // its RAM is gone, and with it every slab placed there (R=1)

        Bridge second = bridge(spec);
        Volume v = second.volume("disk");
        int lost = 0;
        for (int s = 0; s < 8; s++) {
            if (v.slabStatus(s).state() == SlabState.LOST) {
                lost++;
                int slab = s;
                ExecutionException e = assertThrows(ExecutionException.class, () -> read(v, slab * MIB, 4096));
                assertTrue(e.getMessage().contains("no live replica"), e.getMessage());
            } else {
                assertEquals(SlabState.HEALTHY, v.slabStatus(s).state());
                assertArrayEquals(Arrays.copyOfRange(data, s * (int) MIB, s * (int) MIB + 4096),
                        read(v, s * MIB, 4096));
            }
        }
        assertTrue(lost > 0 && lost < 8, "slabs were on both memservers; those on the dead one are lost: " + lost);
        assertEquals(VolumeState.LOST, v.status().state());
    }

    @Test
    void anOutageOnTheBridgeSideCuttingEveryConnectionLosesNothingOnceTheMemserversAreBack() throws Exception {
        memserver(256 * MIB);
        memserver(256 * MIB);
        Bridge b = bridge(volume("disk", 8 * MIB, MIB, 2));
        Volume v = b.volume("disk");
        byte[] data = new byte[8 * (int) MIB];
        new Random(21).nextBytes(data);
        write(v, 0, data);
        // Every connection dies at once (the bridge's network went away); the memservers and their RAM stay.
        b.memservers().forEach(l -> l.connection().close());
        assertThrows(ExecutionException.class, () -> read(v, 0, 4096), "no replica is reachable");
        // The health duty reconnects; each slab takes back a replica that held every acknowledged write.
        await("slabs served again", () -> v.status().state() == VolumeState.HEALTHY);
        assertArrayEquals(data, read(v, 0, data.length));
        byte[] more = new byte[4096];
        Arrays.fill(more, (byte) 7);
        write(v, MIB, more);
        assertArrayEquals(more, read(v, MIB, 4096));
    }
}
