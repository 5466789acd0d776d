package dev.rbridge.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.BitSet;
import org.junit.jupiter.api.Test;

class NumaNodesTest {
    private static BitSet of(int... nodes) {
        BitSet s = new BitSet();
        for (int n : nodes) {
            s.set(n);
        }
        return s;
    }

    @Test
    void readsTheKernelsListSyntax() {
        assertEquals(of(0), NumaNodes.parse("0"));
        assertEquals(of(0, 1), NumaNodes.parse("0-1"));
        assertEquals(of(0, 2, 3, 8), NumaNodes.parse("0,2-3, 8"));
        assertEquals(of(1023), NumaNodes.parse("1023"));
    }

    @Test
    void aMalformedListNamesNoNode() {
        for (String bad : new String[]{"", " ", "x", "1-", "-1", "3-1", "0-1-2", "1024", "0,,1", "0-1023,1024"}) {
            assertTrue(NumaNodes.parse(bad).isEmpty(), "'" + bad + "' names nodes: " + NumaNodes.parse(bad));
        }
    }

    @Test
    void theFirstAllowedNodeIsInTheProcesssList() {
        int first = NumaNodes.firstAllowed();
        String list = NumaNodes.allowedList().orElse("0");
        assertTrue(NumaNodes.parse(list).get(first), first + " not in " + list);
        assertEquals(NumaNodes.parse(list).nextSetBit(0), first);
    }
}
