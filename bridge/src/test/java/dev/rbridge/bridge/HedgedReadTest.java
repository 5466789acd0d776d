package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.SlabState;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.memserver.Memserver;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.Timeout;

import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Hedged reads against two memservers in this JVM, one behind a relay that holds its bytes (a stalled memserver as
 * the bridge sees it): reads complete from the other replica while it stalls, the stalled one is not declared dead
 * for answering late, and a hedged read never returns data older than the last write acknowledged before it was sent.
 */
@org.junit.jupiter.api.Tag("fault")
@Timeout(120)
class HedgedReadTest {
    private static final long MIB = 1 << 20;
    @RegisterExtension
    final InJvmCluster cluster = new InJvmCluster();

    private Memserver memserver() throws Exception {
        return cluster.memserver(64 * MIB);
    }

    private Bridge bridge(boolean hedge, InetSocketAddress... memservers) {
        BridgeConfig.Builder b = BridgeConfig.builder().transport("tcp").startWait(Duration.ofSeconds(5))
                .operationTimeout(Duration.ofSeconds(30)).lanes(1).hedgeReads(hedge);
        for (InetSocketAddress m : memservers) {
            b.memserver(m);
        }
        b.volume(new VolumeSpec("disk", 8 * MIB, 4 * MIB, 2, false, 1, ""));
        return cluster.bridge(b.build());
    }

    /** Memservers A and B, B behind a relay the test can hold, and a bridge over both (volume "disk", R=2). */
    private record TwoReplicas(PartitionRelay toB, Bridge bridge, Volume volume) {
    }

    private TwoReplicas twoReplicas(boolean hedge) throws Exception {
        Memserver a = memserver();
        Memserver b = memserver();
        PartitionRelay toB = cluster.open(new PartitionRelay(b.address()));
        Bridge bridge = bridge(hedge, a.address(), toB.address());
        return new TwoReplicas(toB, bridge, bridge.volume("disk"));
    }

    private static ByteBuffer block(long value) {
        ByteBuffer b = ByteBuffer.allocateDirect(4096);
        while (b.hasRemaining()) {
            b.putLong(value);
        }
        return b.flip();
    }

    private static long readValue(Volume v, long offset, long timeoutMillis) throws Exception {
        ByteBuffer b = ByteBuffer.allocateDirect(4096);
        v.read(offset, b).get(timeoutMillis, TimeUnit.MILLISECONDS);
        long first = b.getLong(0);
        for (int i = 8; i < 4096; i += 8) {
            assertEquals(first, b.getLong(i), "a torn block at " + offset + "+" + i);
        }
        return first;
    }

    @Test
    void readsCompleteFromTheOtherReplicaWhileOneStalls() throws Exception {
        TwoReplicas two = twoReplicas(true);
        PartitionRelay toB = two.toB();
        Bridge bridge = two.bridge();
        Volume v = two.volume();
        for (int i = 0; i < 64; i++) {
            v.write(i * 4096L, block(1000 + i), false).get(10, TimeUnit.SECONDS);
        }
        // Which operation reaches B first once it stalls depends on timing: a read sent to B (which its hedge to A
        // then answers: what this test is after), or a hedge of a slow read to A, sent to B. The latter ties B up
        // with an operation that never answers, so every later read goes to A first and no hedge can win; that is
        // late binding working, but shows nothing here. So B stalls again, up to ten times, until a read meets it.
        long hedges = 0;
        long won = 0;
        for (int attempt = 1; won == 0; attempt++) {
            assertTrue(attempt <= 10, "in ten stalls of B no read was sent to it before a hedge was");
            awaitNothingInFlight(bridge);
            toB.hold();
            long hedges0 = v.readHedges();
            long won0 = v.readHedgesWon();
            // B answers nothing until it is released: every read below completes only if it was served by A.
            for (int round = 0; round < 5; round++) {
                for (int i = 0; i < 64; i++) {
                    assertEquals(1000 + i, readValue(v, i * 4096L, 5000), "block " + i);
                }
            }
            hedges = v.readHedges() - hedges0;
            won = v.readHedgesWon() - won0;
            System.out.println("stalled replica, attempt " + attempt + ": 320 reads, " + hedges + " hedged, " + won
                    + " won by the hedge; hedge delay now " + v.hedgeDelayNanos() / 1000 + " us");
            if (won == 0) {
                toB.release();
            }
        }
        // Without late binding half the reads would go to B first and wait for their hedge (won ~160).
        assertTrue(won <= 32, "the least busy replica takes the reads once one stalls: " + won + " of " + hedges
                + " hedges won");
        toB.release();
        for (int i = 0; i < 64; i++) {
            assertEquals(1000 + i, readValue(v, i * 4096L, 5000));
        }
        MemserverLink lb = bridge.memservers().stream().filter(l -> l.address().equals(toB.address())).findFirst()
                .orElseThrow();
        assertEquals(MemserverLink.State.UP, lb.state(), "answering late is not a fault");
        assertEquals(SlabState.HEALTHY, v.slabStatus(0).state());
    }

    /**
     * Waits until neither memserver has an operation in flight (the volume's own bookkeeping writes may still be on
     * their way after the test's): a B already busy when it stalls would never be offered a read.
     */
    private static void awaitNothingInFlight(Bridge bridge) throws InterruptedException {
        long quiet = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (bridge.memservers().stream().anyMatch(l -> l.inFlight.get() != 0)) {
            assertTrue(System.nanoTime() < quiet, "operations still in flight after 10 s");
            Thread.sleep(5);
        }
    }

    /** The control: without hedging a read sent to the stalled replica waits for it. */
    @Test
    void withoutHedgingAReadWaitsForTheStalledReplica() throws Exception {
        TwoReplicas two = twoReplicas(false);
        PartitionRelay toB = two.toB();
        Volume v = two.volume();
        v.write(0, block(7), false).get(10, TimeUnit.SECONDS);
        toB.hold();
        // Reads take turns among equally busy replicas, so one of the first two goes to B; which one the test does
        // not know, so it reads on until one waits.
        ByteBuffer waiting = null;
        CompletableFuture<Void> waits = null;
        for (int i = 0; i < 64 && waits == null; i++) {
            ByteBuffer b = ByteBuffer.allocateDirect(4096);
            CompletableFuture<Void> f = v.read(0, b);
            try {
                f.get(1000, TimeUnit.MILLISECONDS);
                assertEquals(7, b.getLong(0), "read " + i);
            } catch (TimeoutException e) {
                waiting = b;
                waits = f;
            }
        }
        assertNotNull(waits, "none of 64 reads went to the stalled replica and waited for it");
        toB.release();
        waits.get(10, TimeUnit.SECONDS);
        assertEquals(7, waiting.getLong(0), "the read that waited returns B's data once B answers");
        assertEquals(0, v.readHedges());
    }

    /**
     * A writer bumps a counter in every block while readers read them and the relay holds B in bursts. A read notes,
     * before it is sent, the last value acknowledged for its block; what it returns must not be older. A hedged read
     * that lost its race may well carry older data: it must be the one dropped.
     */
    @Test
    void aHedgedReadNeverReturnsDataOlderThanTheLastAcknowledgedWrite() throws Exception {
        TwoReplicas two = twoReplicas(true);
        PartitionRelay toB = two.toB();
        Volume v = two.volume();
        int blocks = 16;
        AtomicLong[] acked = new AtomicLong[blocks];
        for (int i = 0; i < blocks; i++) {
            v.write(i * 4096L, block(0), false).get(10, TimeUnit.SECONDS);
            acked[i] = new AtomicLong();
        }
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(4);
        AtomicReference<Throwable> failed = new AtomicReference<>();
        Thread stalls = Thread.ofPlatform().start(() -> {
            try {
                while (System.nanoTime() < end) {
                    toB.hold();
                    Thread.sleep(30);
                    toB.release();
                    Thread.sleep(20);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Thread writer = Thread.ofPlatform().start(() -> {
            try {
                for (long n = 1; System.nanoTime() < end; n++) {
                    int i = (int) (n % blocks);
                    v.write(i * 4096L, block(n), false).get(10, TimeUnit.SECONDS);
                    acked[i].set(n);
                }
            } catch (Throwable e) {
                failed.compareAndSet(null, e);
            }
        });
        AtomicLong reads = new AtomicLong();
        List<Thread> readers = new ArrayList<>();
        for (int t = 0; t < 3; t++) {
            int seed = t;
            readers.add(Thread.ofPlatform().start(() -> {
                try {
                    for (int k = seed; System.nanoTime() < end; k++) {
                        int i = k % blocks;
                        long floor = acked[i].get();
                        long got = readValue(v, i * 4096L, 10_000);
                        if (got < floor) {
                            throw new AssertionError("block " + i + " read " + got + " after " + floor
                                    + " was acknowledged");
                        }
                        reads.incrementAndGet();
                    }
                } catch (Throwable e) {
                    failed.compareAndSet(null, e);
                }
            }));
        }
        for (Thread r : readers) {
            r.join();
        }
        writer.join();
        stalls.join();
        toB.release();
        System.out.println("ordering: " + reads.get() + " reads, " + v.readHedges() + " hedged, "
                + v.readHedgesWon() + " won by the hedge");
        assertNull(failed.get(), () -> "failed: " + failed.get());
        assertTrue(v.readHedgesWon() > 0, "some reads were answered by their hedge");
    }
}
