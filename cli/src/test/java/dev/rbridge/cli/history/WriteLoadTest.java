package dev.rbridge.cli.history;

import dev.rbridge.cli.history.History.Kind;
import dev.rbridge.cli.history.History.Outcome;
import org.junit.jupiter.api.Test;

import java.io.IOException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@link WriteLoad} over in-memory stand-ins for a device: one that keeps every write, one that refuses them all. */
class WriteLoadTest {
    private static final int BLOCK = 4096;
    private static final int BLOCKS = 8;

    @Test
    void writesVersionsOfItsOwnWritersAndTheDeviceHoldsTheLastOnes() throws Exception {
        byte[] memory = new byte[BLOCKS * BLOCK];
        BlockTarget.Connector device = () -> new BlockTarget() {
            @Override
            public void write(long offset, byte[] data) {
                synchronized (memory) {
                    System.arraycopy(data, 0, memory, (int) offset, data.length);
                }
            }

            @Override
            public byte[] read(long offset, int length) {
                throw new UnsupportedOperationException("a write load reads nothing");
            }

            @Override
            public void close() {}
        };
        WriteLoad load = WriteLoad.start(device, 101, 3, 0, BLOCKS, BLOCK, 42);
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (load.history().count(Kind.WRITE).get(Outcome.OK) < 300 && System.nanoTime() < deadline) {
            Thread.sleep(5);
        }
        assertTrue(load.stopAndJoin(10_000));
        History h = load.history();
        for (History.Operation o : h.operations()) {
            assertTrue(o.written().writer() >= 101 && o.written().writer() <= 103, h.describe(o));
        }
        for (int b = 0; b < BLOCKS; b++) {
            byte[] block = new byte[BLOCK];
            System.arraycopy(memory, b * BLOCK, block, 0, BLOCK);
            History.Pending p = h.invokeRead(b);
            p.ok(BlockVersion.decode(block));
        }
        RegisterChecker.Result result = RegisterChecker.check(h);
        assertTrue(result.ok(), result.toString());
        assertEquals(0, h.count(Kind.WRITE).get(Outcome.FAILED), h.summary());
        assertTrue(h.count(Kind.WRITE).get(Outcome.OK) >= 300, h.summary());
    }

    @Test
    void aRefusedWriteIsRecordedAsFailedAndTheWritersGoOn() throws Exception {
        BlockTarget.Connector refusing = () -> new BlockTarget() {
            @Override
            public void write(long offset, byte[] data) throws IOException {
                throw new IOException("EIO (stand-in)");
            }

            @Override
            public byte[] read(long offset, int length) throws IOException {
                throw new IOException("EIO (stand-in)");
            }

            @Override
            public void close() {}
        };
        WriteLoad load = WriteLoad.start(refusing, 7, 2, 0, BLOCKS, BLOCK, 1);
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (load.history().count(Kind.WRITE).get(Outcome.FAILED) < 6 && System.nanoTime() < deadline) {
            Thread.sleep(5);
        }
        assertTrue(load.stopAndJoin(10_000));
        History h = load.history();
        assertEquals(0, h.count(Kind.WRITE).get(Outcome.OK), h.summary());
        assertTrue(h.count(Kind.WRITE).get(Outcome.FAILED) >= 6, h.summary());
        assertTrue(h.operations().stream().allMatch(o -> "EIO (stand-in)".equals(o.note())), h.summary());
    }
}
