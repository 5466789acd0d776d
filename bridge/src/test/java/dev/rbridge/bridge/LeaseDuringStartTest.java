package dev.rbridge.bridge;

import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.tcp.TcpProvider;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A lease the bridge has taken is renewed from that moment on, whatever the bridge is still busy with: here its start
 * waits for a second memserver that never answers, for several times the lease's ttl (each attempt waits out a connect
 * timeout longer than the ttl). A lease left to lapse meanwhile is anyone's to take (a second bridge in a failover, for
 * one), and the starting bridge would find its volume taken and its keys rotated under it. Memservers in this JVM over
 * tcp, the silent one behind a {@link PartitionRelay}.
 */
@Timeout(120)
@Tag("fault")
class LeaseDuringStartTest {
    private static final long MIB = 1 << 20;
    private static final Duration TTL = Duration.ofSeconds(3);
    @RegisterExtension
    final InJvmCluster cluster = new InJvmCluster();

    @Test
    void aLeaseTakenAtTheStartIsRenewedWhileTheStartWaitsForAnotherMemserver() throws Exception {
        Memserver a = cluster.memserver(64 * MIB);
        Memserver b = cluster.memserver(64 * MIB);
        PartitionRelay toB = cluster.open(new PartitionRelay(b.address()));
        toB.partition(); // b accepts the connection and answers nothing: each attempt waits out the connect timeout
        BridgeConfig config = BridgeConfig.builder().transport("tcp").startWait(Duration.ofSeconds(10))
                .operationTimeout(Duration.ofSeconds(4)).leaseTtl(TTL).rebuildChunk(256 << 10)
                .memserver(a.address()).memserver(toB.address())
                .volume(new VolumeSpec("disk", 8 * MIB, MIB, 2, false, 1, "")).build();
        CompletableFuture<Bridge> started = CompletableFuture.supplyAsync(() -> cluster.bridge(config));

        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (a.leases().stream().noneMatch(l -> l.volume().equals("disk"))) {
            assertTrue(System.nanoTime() < deadline, "the bridge took no lease on " + a.address());
            Thread.sleep(5);
        }
        // Another client asks a for the volume's lease, again and again, for as long as the bridge starts.
        RemoteConnection rival = cluster.open(new TcpProvider().connect(new ConnectParams().address(a.address())
                .clientName("rival").connectTimeout(Duration.ofSeconds(5)).operationTimeout(Duration.ofSeconds(5))));
        List<Lease> taken = new ArrayList<>();
        int refused = 0;
        while (!started.isDone()) {
            try {
                taken.add(rival.lease("disk", "rival", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS));
                break; // holds it now, and for 30 s
            } catch (ExecutionException e) {
                refused++; // held: by the bridge, or nobody took it yet
            }
            Thread.sleep(20);
        }
        Bridge bridge = started.get(60, TimeUnit.SECONDS);
        assertEquals(List.of(), taken, "the rival took the lease the starting bridge had taken, after " + refused
                + " refusal(s): the bridge let it lapse while it waited for the other memserver");
        assertTrue(refused > 20, "the rival asked for the lease only " + refused + " time(s) during the start");

        Volume v = bridge.volume("disk");
        assertNull(v.fenced());
        ByteBuffer block = ByteBuffer.allocateDirect(4096);
        while (block.hasRemaining()) {
            block.put((byte) 0x5a);
        }
        v.write(0, block.flip(), false).get(10, TimeUnit.SECONDS);
        ByteBuffer back = ByteBuffer.allocateDirect(4096);
        v.read(0, back).get(10, TimeUnit.SECONDS);
        assertEquals(block.rewind(), back.rewind(), "what was written is read back");
    }
}
