package dev.rbridge.cli.history;

import dev.rbridge.cli.history.History.Kind;
import dev.rbridge.cli.history.History.Outcome;
import dev.rbridge.cli.history.RegisterChecker.Result;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The workload and the checker end to end over in-memory stand-ins for a device (no NBD here: the real client is in
 * {@link VersionedWorkloadInteropTest}): an atomic memory passes, one that fails requests (some writes landing anyway)
 * passes with the failures recorded, and one whose connections each keep a private cache, so they miss the others'
 * writes, is caught.
 */
class VersionedWorkloadTest {
    private static final int BLOCK = 4096;

    /** A device stand-in: memory whose every request is atomic (one lock). */
    private static class InMemoryDevice {
        final byte[] bytes;

        InMemoryDevice(int blocks) {
            bytes = new byte[blocks * BLOCK];
        }

        synchronized void write(long offset, byte[] data) {
            System.arraycopy(data, 0, bytes, (int) offset, data.length);
        }

        synchronized byte[] read(long offset, int length) {
            byte[] out = new byte[length];
            System.arraycopy(bytes, (int) offset, out, 0, length);
            return out;
        }

        BlockTarget.Connector atomic() {
            return () -> new BlockTarget() {
                @Override
                public void write(long offset, byte[] data) {
                    InMemoryDevice.this.write(offset, data);
                }

                @Override
                public byte[] read(long offset, int length) {
                    return InMemoryDevice.this.read(offset, length);
                }

                @Override
                public void close() {}
            };
        }

        /** Every fifth request fails; half of the failed writes land all the same (before the error). */
        BlockTarget.Connector failing() {
            return () -> new BlockTarget() {
                @Override
                public void write(long offset, byte[] data) throws IOException {
                    int roll = ThreadLocalRandom.current().nextInt(10);
                    if (roll == 0) {
                        InMemoryDevice.this.write(offset, data);
                    }
                    if (roll < 2) {
                        throw new IOException("EIO (stand-in)");
                    }
                    InMemoryDevice.this.write(offset, data);
                }

                @Override
                public byte[] read(long offset, int length) throws IOException {
                    if (ThreadLocalRandom.current().nextInt(5) == 0) {
                        throw new IOException("EIO (stand-in)");
                    }
                    return InMemoryDevice.this.read(offset, length);
                }

                @Override
                public void close() {}
            };
        }

        /** Each connection serves reads from what it last wrote or read itself: the others' writes go unseen. */
        BlockTarget.Connector privatelyCached() {
            return () -> new BlockTarget() {
                private final Map<Long, byte[]> cache = new HashMap<>();

                @Override
                public void write(long offset, byte[] data) {
                    InMemoryDevice.this.write(offset, data);
                    cache.put(offset, data.clone());
                }

                @Override
                public byte[] read(long offset, int length) {
                    return cache.computeIfAbsent(offset, o -> InMemoryDevice.this.read(o, length)).clone();
                }

                @Override
                public void close() {}
            };
        }
    }

    @Test
    void anAtomicDevicePassesAndEveryBlockIsReadAtTheEnd() throws InterruptedException {
        InMemoryDevice device = new InMemoryDevice(64);
        VersionedWorkload.Running run = VersionedWorkload.builder(device.atomic()).writers(4).blocks(32, 16)
                .maxOperations(20_000).duration(Duration.ofSeconds(30)).seed(2).build().start();
        run.awaitBudget();
        History h = run.finish();
        Result result = RegisterChecker.check(h);
        assertTrue(result.ok(), result + "\n" + run);
        assertEquals(20_000 + 16, h.operations().size(), run.toString());
        assertEquals(0, run.finalPassUnread());
        Map<Outcome, Integer> writes = h.count(Kind.WRITE);
        assertTrue(writes.get(Outcome.OK) > 5_000, run.toString());
        assertEquals(0, writes.get(Outcome.FAILED) + writes.get(Outcome.UNKNOWN), run.toString());
        for (int i = 0; i < 16; i++) {
            History.Operation last = h.operations().get(h.operations().size() - 16 + i);
            assertEquals(32 + i, last.block());
            assertTrue(last.observed() instanceof BlockVersion.Content.Written, "block " + last.block()
                    + " was written during the run: " + last);
        }
        assertTrue(h.operations().stream().noneMatch(o -> o.block() < 32 || o.block() >= 48), "a block out of range");
    }

    @Test
    void failedRequestsAreRecordedAndAWriteThatLandedAnywayIsLegal() throws InterruptedException {
        InMemoryDevice device = new InMemoryDevice(16);
        VersionedWorkload.Running run = VersionedWorkload.builder(device.failing()).writers(3).blocks(0, 8)
                .maxOperations(5_000).seed(3).build().start();
        run.awaitBudget();
        History h = run.finish();
        Result result = RegisterChecker.check(h);
        assertTrue(result.ok(), result + "\n" + run);
        assertTrue(h.count(Kind.WRITE).get(Outcome.FAILED) > 100, run.toString());
        assertTrue(h.count(Kind.READ).get(Outcome.FAILED) > 100, run.toString());
    }

    @Test
    void aConnectorThatFailsFailsTheRequestsUntilItConnects() throws InterruptedException {
        InMemoryDevice device = new InMemoryDevice(16);
        AtomicInteger attempts = new AtomicInteger();
        BlockTarget.Connector atomic = device.atomic();
        BlockTarget.Connector late = () -> {
            if (attempts.incrementAndGet() <= 6) {
                throw new IOException("connection refused (stand-in)");
            }
            return atomic.connect();
        };
        VersionedWorkload.Running run = VersionedWorkload.builder(late).writers(2).blocks(0, 8).maxOperations(1_000)
                .seed(5).build().start();
        run.awaitBudget();
        History h = run.finish();
        assertTrue(RegisterChecker.check(h).ok(), RegisterChecker.check(h) + "\n" + run);
        int failed = h.count(Kind.WRITE).get(Outcome.FAILED) + h.count(Kind.READ).get(Outcome.FAILED);
        // Six attempts fail. A thread's own start takes one; a thread that starts after the sixth connects at once.
        // So the failed requests are six less the starts that failed: 4, 5 or (never both at once) 6.
        assertTrue(failed >= 4 && failed <= 6, "six attempts fail, each a thread's start or a request: " + failed
                + " failed requests; " + run);
        assertTrue(h.operations().stream().filter(o -> o.outcome() == Outcome.FAILED)
                .allMatch(o -> o.note().equals("connection refused (stand-in)")), run.toString());
        assertEquals(0, run.finalPassUnread());
    }

    @Test
    void connectionsThatMissEachOthersWritesAreCaught() throws InterruptedException {
        InMemoryDevice device = new InMemoryDevice(16);
        VersionedWorkload.Running run = VersionedWorkload.builder(device.privatelyCached()).writers(4).blocks(0, 8)
                .maxOperations(5_000).seed(4).build().start();
        run.awaitBudget();
        Result result = RegisterChecker.check(run.finish());
        assertFalse(result.ok(), run.toString());
        assertTrue(RegisterChecker.kinds(result).containsKey(RegisterChecker.Kind.STALE_READ), result.toString());
        assertTrue(result.report(5).lines().count() <= 7, result.report(5));
    }
}
