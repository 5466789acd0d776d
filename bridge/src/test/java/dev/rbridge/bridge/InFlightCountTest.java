package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.bridge.volume.VolumeSpec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.Timeout;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * A memserver's in-flight count (what replica choice and the admin API read) no longer holds an operation once the
 * volume has answered it: whoever continues from a completed read or write, on the completing thread itself, sees
 * the count without it. Two memservers in this JVM, tcp transport, volumes of one and of two replicas.
 */
@Timeout(60)
class InFlightCountTest {
    private static final long MIB = 1 << 20;
    @RegisterExtension
    final InJvmCluster cluster = new InJvmCluster();

    private Bridge bridge(int replicas) throws Exception {
        BridgeConfig.Builder b = BridgeConfig.builder().transport("tcp").startWait(Duration.ofSeconds(5))
                .operationTimeout(Duration.ofSeconds(30)).lanes(1);
        for (int i = 0; i < 2; i++) {
            b.memserver(cluster.memserver(16 * MIB).address());
        }
        b.volume(new VolumeSpec("disk", 8 * MIB, 4 * MIB, replicas, false, 1, ""));
        return cluster.bridge(b.build());
    }

    private static long inFlight(Bridge bridge) {
        return bridge.memservers().stream().mapToLong(l -> l.inFlight.get()).sum();
    }

    /** Runs each operation, and on its completion (the completing thread) reads the in-flight count. */
    private static void assertNothingInFlightOnCompletion(Bridge bridge, String what, Op op) throws Exception {
        for (int i = 0; i < 200; i++) {
            AtomicLong seen = new AtomicLong(-1);
            op.start(i).thenRun(() -> seen.set(inFlight(bridge))).get(10, TimeUnit.SECONDS);
            assertEquals(0, seen.get(), what + " " + i + ": still counted in flight when it completed");
        }
    }

    private interface Op {
        CompletableFuture<Void> start(int i) throws Exception;
    }

    private void check(int replicas) throws Exception {
        Bridge bridge = bridge(replicas);
        Volume v = bridge.volume("disk");
        assertNothingInFlightOnCompletion(bridge, "write", i -> v.write((i % 512) * 4096L,
                ByteBuffer.allocateDirect(4096), false));
        assertNothingInFlightOnCompletion(bridge, "read", i -> v.read((i % 512) * 4096L,
                ByteBuffer.allocateDirect(4096)));
        for (MemserverLink l : bridge.memservers()) {
            assertEquals(0, l.inFlight.get(), l.address().toString());
        }
    }

    @Test
    void oneReplica() throws Exception {
        check(1);
    }

    @Test
    void twoReplicas() throws Exception {
        check(2);
    }
}
