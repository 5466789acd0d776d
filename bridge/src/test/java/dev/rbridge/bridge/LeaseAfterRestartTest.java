package dev.rbridge.bridge;

import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.bridge.volume.VolumeState;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.rdma.ConnectParams;
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
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A bridge restarted while one of its memservers was cut off finds, when that memserver comes back, the lease of its
 * previous process still held there: the memserver never heard that process's connection end and keeps its lease until
 * the ttl runs out. That is no other bridge, and the volume must not be fenced for it; a lease someone really holds
 * past the ttl is. Memservers in this JVM over tcp, one behind a {@link PartitionRelay}.
 */
@Timeout(120)
@Tag("fault")
class LeaseAfterRestartTest {
    private static final long MIB = 1 << 20;
    private static final Duration TTL = Duration.ofSeconds(10);
    @RegisterExtension
    final InJvmCluster cluster = new InJvmCluster();

    private Memserver memserver() throws Exception {
        return cluster.memserver(256 * MIB);
    }

    private Bridge bridge(Duration ttl, InetSocketAddress... memservers) {
        BridgeConfig.Builder b = BridgeConfig.builder().transport("tcp").startWait(Duration.ofSeconds(1))
                .operationTimeout(Duration.ofSeconds(1)).leaseTtl(ttl).rebuildChunk(256 << 10);
        for (InetSocketAddress m : memservers) {
            b.memserver(m);
        }
        b.volume(new VolumeSpec("disk", 8 * MIB, MIB, 2, false, 1, ""));
        return cluster.bridge(b.build());
    }

    /** True if the volume {@code disk} is leased, live, on {@code m}. */
    private static boolean leased(Memserver m) {
        return m.leases().stream().anyMatch(l -> l.volume().equals("disk") && l.remainingMillis() > 0);
    }

    @Test
    void thePreviousProcesssLeaseOnAMemserverThatWasCutOffIsWaitedOutNotFenced() throws Exception {
        Memserver a = memserver();
        Memserver b = memserver();
        PartitionRelay toB = cluster.open(new PartitionRelay(b.address()));
        Bridge before = bridge(TTL, a.address(), toB.address());
        byte[] data = new byte[256 << 10];
        new Random(7).nextBytes(data);
        Volume v = before.volume("disk");
        v.write(0, ByteBuffer.allocateDirect(data.length).put(data).flip(), false).get(10, TimeUnit.SECONDS);

        // The network to b fails; the bridge process goes away (b never hears of it) and a new one starts.
        toB.partition();
        before.close();
        Bridge after = bridge(TTL, a.address(), toB.address());
        assertNull(InJvmCluster.link(after, toB.address()).connection(), "b should have been unreachable at start");
        assertTrue(leased(b), "b should still hold the previous process's lease: " + b.leases());

        // The network comes back within the ttl: b refuses the new process's lease until the old one lapses.
        toB.heal();
        long deadline = System.nanoTime() + TTL.toNanos() + TimeUnit.SECONDS.toNanos(8);
        Volume v2 = after.volume("disk");
        while (InJvmCluster.link(after, toB.address()).connection() == null && v2.fenced() == null
                && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        assertNull(v2.fenced(), "a lease of this bridge's previous process fenced the volume");
        assertNotNull(InJvmCluster.link(after, toB.address()).connection(),
                "the bridge did not take b back within the ttl: "
                        + InJvmCluster.link(after, toB.address()).lastError());
        ByteBuffer back = ByteBuffer.allocateDirect(data.length);
        v2.read(0, back).get(10, TimeUnit.SECONDS);
        byte[] got = new byte[data.length];
        back.get(got);
        assertArrayEquals(data, got);
        v2.write(MIB, ByteBuffer.allocateDirect(data.length).put(data).flip(), false).get(10, TimeUnit.SECONDS);
        v2.flush().get(10, TimeUnit.SECONDS);
        deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (v2.status().state() != VolumeState.HEALTHY) {
            assertTrue(System.nanoTime() < deadline, "not healthy again: " + v2.status());
            Thread.sleep(50);
        }
    }

    @Test
    void aLeaseSomeoneElseHoldsPastTheTtlFencesTheVolume() throws Exception {
        Duration ttl = Duration.ofSeconds(3);
        Memserver a = memserver();
        Memserver b = memserver();
        PartitionRelay toB = cluster.open(new PartitionRelay(b.address()));
        toB.partition();
        // Another bridge holds the volume on b, and renews its lease for as long as it runs.
        RemoteConnection rival = cluster.open(new TcpProvider().connect(new ConnectParams().address(b.address())
                .clientName("rival").connectTimeout(Duration.ofSeconds(5)).operationTimeout(Duration.ofSeconds(5))));
        rival.lease("disk", "rival", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS);
        Thread renewer = Thread.ofPlatform().daemon().start(() -> {
            while (rival.isOpen()) {
                try {
                    rival.lease("disk", "rival", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS);
                    Thread.sleep(200);
                } catch (Exception e) {
                    return;
                }
            }
        });
        cluster.open(renewer::interrupt);
        Bridge bridge = bridge(ttl, a.address(), toB.address());
        Volume v = bridge.volume("disk");
        toB.heal();
        long healed = System.nanoTime();
        // Refused all along, but it could be this bridge's previous process: no fence within the ttl.
        Thread.sleep(ttl.toMillis() / 2);
        assertNull(v.fenced(), "fenced at once, before a previous process's lease could have lapsed");
        long deadline = healed + ttl.toNanos() + TimeUnit.SECONDS.toNanos(8);
        while (v.fenced() == null && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        assertNotNull(v.fenced(), "a lease held past the ttl by another client did not fence the volume");
        assertTrue(v.fenced().contains("lease"), v.fenced());
    }
}
