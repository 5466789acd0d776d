package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.Bridge;
import dev.rbridge.bridge.BridgeConfig;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.memserver.MemserverConfig;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Providers;
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
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A bridge that dies with writes in flight can leave the replicas of a slab different. The next bridge learns of the
 * unclean exit from the lease it takes over and resynchronizes every replicated slab from one replica, so all
 * replicas end up identical and reads never flip between old and new bytes. Real memservers, local transport.
 */
@Timeout(60)
class ResyncAfterUncleanExitTest {
    private static final long MIB = 1 << 20;
    private final List<Memserver> memservers = new ArrayList<>();
    private final List<Bridge> bridges = new ArrayList<>();

    @AfterEach
    void tearDown() {
        bridges.forEach(Bridge::close);
        memservers.forEach(Memserver::close);
    }

    private Bridge bridge(VolumeSpec spec) {
        BridgeConfig.Builder b = BridgeConfig.builder().transport("local").startWait(Duration.ZERO)
                .operationTimeout(Duration.ofSeconds(2)).rebuildChunk(64 << 10);
        memservers.forEach(m -> b.memserver(m.address()));
        Bridge bridge = Bridge.start(b.volume(spec).build());
        bridges.add(bridge);
        return bridge;
    }

    private static byte[] replicaBytes(Replica r, long length) throws Exception {
        ByteBuffer b = ByteBuffer.allocateDirect((int) length);
        r.connection().read(r.region(), 0, MemorySegment.ofBuffer(b)).get(5, TimeUnit.SECONDS);
        byte[] out = new byte[(int) length];
        b.get(out);
        return out;
    }

    @Test
    void divergedReplicasAreMadeIdenticalAfterAnUncleanExit() throws Exception {
        for (int i = 0; i < 2; i++) {
            memservers.add(Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 64 * MIB, null,
                    "local")));
        }
        VolumeSpec spec = new VolumeSpec("disk", 4 * MIB, MIB, 2, false, 1, "");
        Bridge first = bridge(spec);
        Volume v = first.volume("disk");
        byte[] data = new byte[4 * (int) MIB];
        new Random(1).nextBytes(data);
        v.write(0, ByteBuffer.allocateDirect(data.length).put(data).flip(), false).get(5, TimeUnit.SECONDS);
        // What a crash mid-write leaves behind: one replica of slab 2 got a write the other never saw.
        Replica second = v.slab(2).set.live.get(1);
        byte[] torn = new byte[64 << 10];
        new Random(2).nextBytes(torn);
        second.connection().write(second.region(), 4096, MemorySegment.ofBuffer(
                ByteBuffer.allocateDirect(torn.length).put(torn).flip())).get(5, TimeUnit.SECONDS);
        first.close();
        bridges.remove(first);
        // The previous owner exits without giving its lease back (as a killed process does).
        for (Memserver m : memservers) {
            try (RemoteConnection c = Providers.byName("local").connect(new ConnectParams().address(m.address()))) {
                c.lease("disk", "a bridge that crashed", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS);
            }
        }

        Bridge next = bridge(spec);
        Volume w = next.volume("disk");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (true) {
            boolean pending = false;
            for (int s = 0; s < w.slabCount(); s++) {
                pending |= w.slab(s).resyncWanted.get() || w.slab(s).set.building != null;
            }
            if (!pending && w.status().state() == VolumeState.HEALTHY) {
                break;
            }
            assertTrue(System.nanoTime() < deadline, "resync did not finish: " + w.status());
            Thread.sleep(20);
        }
        for (int s = 0; s < w.slabCount(); s++) {
            ReplicaSet set = w.slab(s).set;
            assertEquals(2, set.live.size());
            assertArrayEquals(replicaBytes(set.live.get(0), MIB), replicaBytes(set.live.get(1), MIB),
                    "replicas of slab " + s + " differ after the resync");
        }
        byte[] slab2 = replicaBytes(w.slab(2).set.live.getFirst(), MIB);
        byte[] expectedOld = java.util.Arrays.copyOfRange(data, 2 * (int) MIB, 3 * (int) MIB);
        byte[] expectedTorn = expectedOld.clone();
        System.arraycopy(torn, 0, expectedTorn, 4096, torn.length);
        assertTrue(java.util.Arrays.equals(slab2, expectedOld) || java.util.Arrays.equals(slab2, expectedTorn),
                "the slab holds either version of the torn write, never a mix");
        assertNotEquals(VolumeState.LOST, next.volume("disk").status().state());
    }
}
