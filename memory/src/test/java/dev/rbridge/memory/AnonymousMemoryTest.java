package dev.rbridge.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

class AnonymousMemoryTest {

    /** With transparent huge pages forced on, one write may back 2 MiB: page-exact counts only hold without. */
    private static void assumePageExactCounts() throws IOException {
        Path thp = Path.of("/sys/kernel/mm/transparent_hugepage/enabled");
        Assumptions.assumeFalse(Files.exists(thp) && Files.readString(thp).contains("[always]"),
                "transparent huge pages are 'always' on this host");
    }

    @Test
    void residentBytesFollowWritesAndReleases() throws IOException {
        assumePageExactCounts();
        try (AnonymousMemory m = AnonymousMemory.map(64L << 20)) {
            assertEquals(0, m.residentBytes(), "nothing is backed before the first write");
            m.segment().set(ValueLayout.JAVA_BYTE, 0, (byte) 1);
            m.segment().set(ValueLayout.JAVA_BYTE, 5 * 4096 + 17, (byte) 1);
            m.segment().set(ValueLayout.JAVA_BYTE, (64L << 20) - 1, (byte) 1);
            assertEquals(3 * 4096, m.residentBytes());
            m.release(0, 8 * 4096);
            assertEquals(4096, m.residentBytes(), "released pages go back to the system");
            assertEquals(0, m.segment().get(ValueLayout.JAVA_BYTE, 5 * 4096 + 17), "and read as zeroes");
            m.close();
            assertEquals(0, m.residentBytes());
        }
    }

    @Test
    void readingUntouchedMemoryIsCountedAsTheKernelBacksIt() throws IOException {
        // Most kernels map the shared zero page on a read fault (free, and not counted); some back the page (Linux
        // 6.18 on this project's CI VMs), which is why readers of region memory consult WrittenPages. Either way the
        // count must say what the kernel did.
        assumePageExactCounts();
        try (AnonymousMemory m = AnonymousMemory.map(64L << 20)) {
            for (long off = 0; off < (1 << 20); off += 4096) {
                m.segment().get(ValueLayout.JAVA_BYTE, off);
            }
            long resident = m.residentBytes();
            assertTrue(resident == 0 || resident == 1 << 20, "1 MiB read page by page shows as " + resident);
            System.out.println("this kernel " + (resident == 0 ? "maps the shared zero page on a read fault"
                    : "backs a page on a read fault") + " (" + System.getProperty("os.version") + ")");
        }
    }

    @Test
    void releaseForgetsWhatWasWritten() {
        try (AnonymousMemory m = AnonymousMemory.map(1 << 20)) {
            m.writtenPages().mark(4096 - 1, 4096 * 3);
            m.release(4096, 2 * 4096);
            assertTrue(m.writtenPages().isWritten(0));
            assertFalse(m.writtenPages().isWritten(4096));
            assertFalse(m.writtenPages().isWritten(2 * 4096));
            assertTrue(m.writtenPages().isWritten(3 * 4096));
        }
    }

    /** The policy the kernel holds for the mapping starting at {@code address}, from /proc/self/numa_maps. */
    static String numaPolicy(long address) throws IOException {
        String start = Long.toHexString(address) + " ";
        List<String> lines = Files.readAllLines(Path.of("/proc/self/numa_maps"));
        return lines.stream().filter(l -> l.startsWith(start)).findFirst()
                .map(l -> l.split(" ")[1]).orElseThrow(() -> new AssertionError("no numa_maps line for " + start));
    }

    @Test
    void pagesArePlacedOnThePreferredNode() throws IOException {
        Assumptions.assumeTrue(Files.exists(Path.of("/proc/self/numa_maps")), "a kernel without NUMA");
        int node = NumaNodes.firstAllowed();
        try (AnonymousMemory m = AnonymousMemory.map(4 << 20, false, false, node)) {
            m.segment().set(ValueLayout.JAVA_BYTE, 0, (byte) 1);
            String line = Files.readAllLines(Path.of("/proc/self/numa_maps")).stream()
                    .filter(l -> l.startsWith(Long.toHexString(m.segment().address()) + " ")).findFirst().orElseThrow();
            assertEquals("prefer:" + node, numaPolicy(m.segment().address()), line);
            assertTrue(line.contains(" N" + node + "=1"), "the touched page is on node " + node + ": " + line);
        }
        try (AnonymousMemory m = AnonymousMemory.map(4 << 20)) {
            assertEquals("default", numaPolicy(m.segment().address()), "without a node the kernel's policy stays");
        }
    }

    @Test
    void aNodeThatIsNotThereIsRefusedWithTheReason() throws IOException {
        Assumptions.assumeTrue(Files.exists(Path.of("/proc/self/numa_maps")), "a kernel without NUMA");
        int absent = 63;
        Assumptions.assumeFalse(Files.exists(Path.of("/sys/devices/system/node/node" + absent)));
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> AnonymousMemory.map(1 << 20, false, false, absent));
        assertTrue(e.getMessage().contains("NUMA node 63") && e.getMessage().contains("EINVAL"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> AnonymousMemory.map(1 << 20, false, false, -2));
        assertThrows(IllegalArgumentException.class, () -> AnonymousMemory.map(1 << 20, false, false,
                AnonymousMemory.MAX_NUMA_NODES));
    }
}
