package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The client's progress thread polling before it sleeps ({@link ProgressSpin}), over UCX's tcp transport (on by
 * default only on an RDMA NIC, so turned on here through the test seam): every operation still completes with the
 * right data, the thread does poll while operations are outstanding, and it stops polling once nothing is.
 */
@Timeout(120)
class UcxProgressSpinTest {
    private UcxLoopback loopback;

    @AfterEach
    void tearDown() {
        UcxConnection.spinBudgetNanosForTests = -1;
        if (loopback != null) {
            loopback.close();
        }
    }

    @Test
    void operationsCompleteWhileThePollingThreadSpinsAndItStopsWhenNothingIsOutstanding() throws Exception {
        loopback = new UcxLoopback("spin");
        UcxConnection.spinBudgetNanosForTests = ProgressSpin.MAX_BUDGET_NANOS;
        try (UcxConnection c = loopback.connect("spin");
                Arena arena = Arena.ofShared()) {
            assertEquals(ProgressSpin.MAX_BUDGET_NANOS, c.loop().spin().budgetNanos());
            RegionDescriptor r = c.allocate(RegionTag.scratch("spin"), 1 << 20).get(30, TimeUnit.SECONDS);
            int blocks = 64;
            MemorySegment src = arena.allocate(4096L * blocks);
            for (long i = 0; i < src.byteSize(); i++) {
                src.set(ValueLayout.JAVA_BYTE, i, (byte) (i * 31 + i / 4096));
            }
            for (int round = 0; round < 4; round++) { // one at a time, then all in flight at once
                List<CompletableFuture<Void>> writes = new ArrayList<>();
                for (int b = 0; b < blocks; b++) {
                    CompletableFuture<Void> w = c.write(r, 4096L * b, src.asSlice(4096L * b, 4096));
                    if (round % 2 == 0) {
                        w.get(30, TimeUnit.SECONDS);
                    }
                    writes.add(w);
                }
                CompletableFuture.allOf(writes.toArray(CompletableFuture[]::new)).get(30, TimeUnit.SECONDS);
                MemorySegment dst = arena.allocate(4096L * blocks);
                List<CompletableFuture<Void>> reads = new ArrayList<>();
                for (int b = 0; b < blocks; b++) {
                    reads.add(c.read(r, 4096L * b, dst.asSlice(4096L * b, 4096)));
                }
                CompletableFuture.allOf(reads.toArray(CompletableFuture[]::new)).get(30, TimeUnit.SECONDS);
                assertArrayEquals(src.toArray(ValueLayout.JAVA_BYTE), dst.toArray(ValueLayout.JAVA_BYTE),
                        "round " + round);
            }
            long spells = c.loop().call(() -> c.loop().spin().spells(), 10_000);
            assertTrue(spells > 0, "the progress thread never polled with operations outstanding");
            for (int i = 0; i < 50; i++) { // woken with nothing outstanding: it must go back to sleep at once
                c.loop().call(() -> null, 10_000);
                Thread.sleep(2);
            }
            assertEquals(spells, (long) c.loop().call(() -> c.loop().spin().spells(), 10_000),
                    "the progress thread polled with nothing outstanding");
        }
    }
}
