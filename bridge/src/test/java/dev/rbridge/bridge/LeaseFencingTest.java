package dev.rbridge.bridge;

import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.bridge.volume.VolumeState;
import dev.rbridge.memserver.ClientView;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.memserver.MemserverConfig;
import dev.rbridge.nbd.device.BlockDeviceException;
import dev.rbridge.nbd.protocol.Errno;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.local.LocalProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * What a bridge does when a volume's lease is no longer its own on some memserver: it stops serving that volume with
 * EIO instead of writing on to the replicas it still reaches (two bridges writing one volume is worse than none), and
 * it tells losing its lease from merely losing its connection. Memservers in this JVM over the local transport; the
 * operator's disconnect cuts the bridge's connection as a network would.
 */
@Timeout(120)
class LeaseFencingTest {
    private static final long MIB = 1 << 20;
    private final List<Memserver> memservers = new ArrayList<>();
    private final List<Bridge> bridges = new ArrayList<>();
    private final List<RemoteConnection> rivals = new ArrayList<>();

    @AfterEach
    void tearDown() {
        rivals.forEach(RemoteConnection::close);
        bridges.forEach(Bridge::close);
        memservers.forEach(Memserver::close);
    }

    private Memserver memserver() throws Exception {
        Memserver m = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 256 * MIB, null,
                "local"));
        memservers.add(m);
        return m;
    }

    private Bridge bridge(VolumeSpec... volumes) {
        BridgeConfig.Builder b = BridgeConfig.builder().transport("local").startWait(Duration.ZERO)
                .operationTimeout(Duration.ofSeconds(2)).leaseTtl(Duration.ofSeconds(1)).rebuildChunk(256 << 10);
        memservers.forEach(m -> b.memserver(m.address()));
        for (VolumeSpec v : volumes) {
            b.volume(v);
        }
        Bridge bridge = Bridge.start(b.build());
        bridges.add(bridge);
        return bridge;
    }

    private RemoteConnection rival(Memserver m) throws RemoteMemoryException {
        RemoteConnection c = new LocalProvider().connect(new ConnectParams().address(m.address()).clientName("rival"));
        rivals.add(c);
        return c;
    }

    private static VolumeSpec volume(String name) {
        return new VolumeSpec(name, 8 * MIB, MIB, 2, false, 1, "");
    }

    /** Cuts the bridge's connection to {@code m}, as a network fault or an operator would. */
    private static void cutBridge(Memserver m) {
        ClientView bridge = m.clients().stream().filter(c -> c.name().startsWith("rbridge-bridge"))
                .findFirst().orElseThrow(() -> new AssertionError("no bridge among " + m.clients()));
        assertTrue(m.disconnect(bridge.id()));
    }

    private static void write(Volume v, long offset, byte[] data) throws Exception {
        v.write(offset, ByteBuffer.allocateDirect(data.length).put(data).flip(), false).get(10, TimeUnit.SECONDS);
    }

    private static byte[] read(Volume v, long offset, int length) throws Exception {
        ByteBuffer b = ByteBuffer.allocateDirect(length);
        v.read(offset, b).get(10, TimeUnit.SECONDS);
        byte[] out = new byte[length];
        b.get(out);
        return out;
    }

    /** {@code rival} takes {@code volume}'s lease once the memserver saw the bridge's connection end (5 s at most). */
    private static Lease leaseOnceTheCutIsSeen(RemoteConnection rival, String volume) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (System.nanoTime() < deadline) {
            try {
                return rival.lease(volume, "rival", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                Thread.sleep(5); // the memserver has not seen the bridge's connection end yet
            }
        }
        return null;
    }

    @Test
    void aBridgeWhoseLeaseWasTakenStopsServingThatVolumeWithEio() throws Exception {
        Memserver taken = memserver();
        Memserver kept = memserver();
        Bridge b = bridge(volume("victim"), volume("bystander"));
        byte[] data = new byte[64 << 10];
        new Random(3).nextBytes(data);
        write(b.volume("victim"), 0, data);
        write(b.volume("bystander"), 0, data);

        cutBridge(taken);
        RemoteConnection rival = rival(taken);
        Lease lease = leaseOnceTheCutIsSeen(rival, "victim");
        assertTrue(lease != null && lease.tookOver(), "the rival should have taken the lease over: " + lease);

        // The bridge reconnects, finds the lease taken, and must not go on writing to the replica it still has.
        Volume victim = b.volume("victim");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        BlockDeviceException refused = null;
        while (refused == null && System.nanoTime() < deadline) {
            rival.lease("victim", "rival", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS); // the rival renews
            try {
                write(victim, 0, data);
                Thread.sleep(100);
            } catch (ExecutionException e) {
                refused = assertInstanceOf(BlockDeviceException.class, e.getCause());
            }
        }
        if (refused == null) {
            fail("the bridge still writes to volume victim 15 s after another client took its lease on "
                    + taken.address() + ": " + victim.status());
        }
        assertEquals(Errno.EIO, refused.errno(), refused.getMessage());
        assertTrue(refused.getMessage().contains("lease"), refused.getMessage());
        ExecutionException readFails = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                () -> read(victim, 0, 4096));
        assertEquals(Errno.EIO, assertInstanceOf(BlockDeviceException.class, readFails.getCause()).errno());
        // Nothing that vouches for the data answers either: a successful FLUSH would tell the client its writes are
        // durable, a BLOCK_STATUS would describe data this bridge no longer serves.
        ExecutionException flushFails = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                () -> victim.flush().get(10, TimeUnit.SECONDS));
        assertEquals(Errno.EIO, assertInstanceOf(BlockDeviceException.class, flushFails.getCause()).errno());
        ExecutionException statusFails = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                () -> victim.blockStatus(0, 4096, 16).get(10, TimeUnit.SECONDS));
        assertEquals(Errno.EIO, assertInstanceOf(BlockDeviceException.class, statusFails.getCause()).errno());
        assertEquals(VolumeState.FENCED, victim.status().state());
        assertTrue(victim.fenced().contains(taken.address().getHostString()), victim.fenced());

        // Its lease on the other memserver is given back, so whoever owns the volume now can take that one too.
        RemoteConnection heir = rival(kept);
        deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        Lease there = null;
        while (there == null && System.nanoTime() < deadline) {
            try {
                there = heir.lease("victim", "rival", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                Thread.sleep(50);
            }
        }
        assertTrue(there != null, "the fenced bridge kept its lease on " + kept.address());

        // Its other volume is served as before, on both memservers.
        Volume bystander = b.volume("bystander");
        assertNull(bystander.fenced());
        write(bystander, 4096, data);
        assertArrayEquals(data, read(bystander, 4096, data.length));
    }

    @Test
    void leasesAreAtMostFiveMinutesAndTheClientNameKeepsTheOwnersSecretPart() {
        IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                () -> BridgeConfig.builder().memserver(new InetSocketAddress("127.0.0.1", 7471))
                        .memserver(new InetSocketAddress("127.0.0.1", 7472)).volume(volume("disk"))
                        .leaseTtl(Duration.ofMinutes(6)).build());
        assertTrue(e.getMessage().contains("at most 300 s"), e.getMessage());
        assertEquals("bridge@host:123", Bridge.publicName("bridge@host:123:0badcafe"));
        assertEquals("chosen-by-hand", Bridge.publicName("chosen-by-hand"));
    }

    @Test
    void aBridgeWhoseConnectionWasCutTakesItsLeaseBackAndReopensItsRegions() throws Exception {
        Memserver cut = memserver();
        memserver();
        Bridge b = bridge(volume("disk"));
        Volume v = b.volume("disk");
        byte[] data = new byte[3 * (int) MIB];
        new Random(4).nextBytes(data);
        write(v, 0, data);

        cutBridge(cut);
        // Its new connection takes the lease from its old one: the keys rotate, it reopens the regions, rebuilds.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (v.status().state() != VolumeState.HEALTHY
                || b.memservers().stream().anyMatch(l -> l.connection() == null)) {
            assertTrue(System.nanoTime() < deadline, "not healthy again: " + v.status());
            Thread.sleep(50);
        }
        assertNull(v.fenced(), "its own reconnect is no lost lease");
        assertArrayEquals(data, read(v, 0, data.length));
        byte[] more = new byte[128 << 10];
        new Random(5).nextBytes(more);
        write(v, 5 * MIB, more);
        assertArrayEquals(more, read(v, 5 * MIB, more.length));
    }

    @Test
    void aBridgeReconnectingWhereAnotherBridgeHadTheVolumeMeanwhileStopsServingIt() throws Exception {
        Memserver cut = memserver();
        memserver();
        Bridge b = bridge(volume("disk"));
        Volume v = b.volume("disk");
        byte[] data = new byte[64 << 10];
        new Random(6).nextBytes(data);
        write(v, 0, data);

        // While the bridge is cut off, another bridge takes the volume there, and gives it back as it stops cleanly.
        cutBridge(cut);
        RemoteConnection rival = rival(cut);
        Lease lease = leaseOnceTheCutIsSeen(rival, "disk");
        assertTrue(lease != null && lease.ownerChanges() > 0, "the rival should have had the lease: " + lease);
        rival.unlease("disk", "rival").get(5, TimeUnit.SECONDS);

        // The bridge's new connection is granted the lease, nobody holding it: but what it knows of the volume may be
        // stale (the other bridge may have moved or rebuilt slabs), so it must not serve it on.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (v.fenced() == null) {
            assertTrue(System.nanoTime() < deadline, "still serving after another bridge had the volume on "
                    + cut.address() + ": " + v.status());
            Thread.sleep(20);
        }
        assertTrue(v.fenced().contains("another bridge held the volume there"), v.fenced());
        ExecutionException refused = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                () -> write(v, 0, data));
        assertEquals(Errno.EIO, assertInstanceOf(BlockDeviceException.class, refused.getCause()).errno());
    }
}
