package dev.rbridge.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

class WrittenPagesTest {
    static final long P = WrittenPages.PAGE;

    @Test
    void marksEveryPageARangeTouchesAndClearsOnlyWholePages() {
        WrittenPages w = new WrittenPages(1000 * P);
        assertFalse(w.isWritten(0));
        w.mark(P - 1, 2); // the last byte of page 0 and the first of page 1
        assertTrue(w.isWritten(0));
        assertTrue(w.isWritten(2 * P - 1));
        assertFalse(w.isWritten(2 * P));
        assertEquals(2 * P, w.writtenBytes());
        w.clear(1, 2 * P); // page 1 lies wholly inside, page 0 does not
        assertTrue(w.isWritten(0));
        assertFalse(w.isWritten(P));
        w.mark(0, 0);
        assertEquals(P, w.writtenBytes());
    }

    @Test
    void runsFollowTheMarksAcrossWordBoundaries() {
        // Against a model: random marks and clears, then every run from random starts.
        long pages = 64 * 5 + 17;
        WrittenPages w = new WrittenPages(pages * P);
        BitSet model = new BitSet();
        Random rnd = new Random(3);
        for (int i = 0; i < 300; i++) {
            long from = rnd.nextLong(pages * P);
            long len = rnd.nextLong(Math.min(pages * P - from, 200 * P) + 1);
            if (rnd.nextInt(3) > 0) {
                w.mark(from, len);
                if (len > 0) {
                    model.set((int) (from / P), (int) ((from + len - 1) / P) + 1);
                }
            } else {
                w.clear(from, len);
                long first = (from + P - 1) / P;
                long end = (from + len) / P;
                if (first < end) {
                    model.clear((int) first, (int) end);
                }
            }
            long start = rnd.nextLong(pages * P);
            long stop = start + rnd.nextLong(pages * P - start) + 1;
            List<long[]> runs = new ArrayList<>();
            for (long at = start; at < stop;) {
                long e = w.runEnd(at, stop);
                assertTrue(e > at && e <= stop, "run end " + e + " from " + at);
                runs.add(new long[]{at, e, w.isWritten(at) ? 1 : 0});
                at = e;
            }
            for (int k = 0; k < runs.size(); k++) {
                long[] run = runs.get(k);
                for (long b = run[0]; b < run[1]; b += P / 2) {
                    assertEquals(run[2] == 1, model.get((int) (b / P)), "byte " + b + " in run " + k);
                }
                if (k > 0) {
                    assertTrue(runs.get(k - 1)[2] != run[2], "neighbouring runs differ");
                }
            }
        }
    }

    @Test
    void everythingCountsAsWrittenOnceExposed() {
        WrittenPages w = new WrittenPages(10 * P + 5);
        w.markEverything();
        assertTrue(w.isWritten(10 * P + 4));
        assertEquals(10 * P + 5, w.runEnd(0, 10 * P + 5));
        assertEquals(11 * P, w.writtenBytes());
    }

    @Test
    void refusesRangesOutsideTheMemory() {
        WrittenPages w = new WrittenPages(4 * P);
        assertThrows(IndexOutOfBoundsException.class, () -> w.mark(3 * P, 2 * P));
        assertThrows(IndexOutOfBoundsException.class, () -> w.isWritten(4 * P));
        assertThrows(IndexOutOfBoundsException.class, () -> w.runEnd(-1, 5));
    }
}
