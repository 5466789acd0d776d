package dev.rbridge.bridge.volume;

import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The parts of read hedging that need no memserver: the delay estimate and the scratch buffers. */
class ReadHedgingPartsTest {
    @Test
    void theDelayIsTheInitialOneUntilAWindowIsFullThenThe95thPercentile() {
        ReadLatency l = new ReadLatency();
        for (int i = 0; i < ReadLatency.WINDOW - 1; i++) {
            l.sample(100_000);
        }
        assertEquals(ReadLatency.INITIAL_DELAY_NANOS, l.delayNanos());
        l.sample(100_000);
        assertEquals(100_000, l.delayNanos());
        // 10% of reads at 30 ms: the 95th percentile is one of them, clamped to the longest delay
        for (int i = 0; i < ReadLatency.WINDOW; i++) {
            l.sample(i % 10 == 0 ? 30_000_000 : 200_000);
        }
        assertEquals(ReadLatency.MAX_DELAY_NANOS, l.delayNanos());
        // 3% slow: below the 95th percentile, so the delay is what the others take
        for (int i = 0; i < ReadLatency.WINDOW; i++) {
            l.sample(i % 33 == 0 ? 30_000_000 : 200_000);
        }
        assertEquals(200_000, l.delayNanos());
        for (int i = 0; i < ReadLatency.WINDOW; i++) {
            l.sample(1_000);
        }
        assertEquals(ReadLatency.MIN_DELAY_NANOS, l.delayNanos(), "never shorter than the floor");
    }

    @Test
    void scratchBuffersComeInPowersOfTwoAndAreBounded() {
        ScratchBuffers b = new ScratchBuffers(128 << 10, 1 << 20);
        MemorySegment small = b.take(1);
        assertEquals(4096, small.byteSize());
        assertEquals(8192, b.take(4097).byteSize());
        MemorySegment large = b.take(128 << 10);
        assertEquals(128 << 10, large.byteSize());
        assertTrue(large.isNative() && large.address() % 4096 == 0, "page-aligned native memory");
        b.give(large);
        assertSame(large, b.take(100_000), "an idle buffer of the size is reused");
        assertEquals(4096 + 8192 + (128 << 10), b.inUse());
        // 1 MiB in use at most: six more 128 KiB buffers fit, the seventh does not
        List<MemorySegment> taken = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            taken.add(b.take(128 << 10));
        }
        assertNull(b.take(128 << 10), "past the bound: none");
        assertNotNull(b.take(64 << 10), "a smaller one still fits");
        assertNull(b.take(64 << 10), "then none");
        taken.forEach(b::give);
        assertNotNull(b.take(128 << 10));
        // idle buffers are bounded per size
        ScratchBuffers c = new ScratchBuffers(128 << 10, 1 << 30);
        List<MemorySegment> many = new ArrayList<>();
        for (int i = 0; i < ScratchBuffers.IDLE_PER_SIZE + 10; i++) {
            many.add(c.take(4096));
        }
        many.forEach(c::give);
        assertEquals(ScratchBuffers.IDLE_PER_SIZE, c.idle(), "at most " + ScratchBuffers.IDLE_PER_SIZE
                + " idle per size");
        assertEquals(0, c.inUse());
    }
}
