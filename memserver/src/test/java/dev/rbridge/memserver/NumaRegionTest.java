package dev.rbridge.memserver;

import dev.rbridge.memory.NumaNodes;

import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RegionTag;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A memserver told a NUMA node grants regions whose pages the kernel takes from that node. */
class NumaRegionTest {
    private static final long MIB = 1 << 20;

    /** The numa_maps line of the mapping that holds {@code address}; the region is one mapping from its start. */
    private static String numaMapsLine(long address) throws IOException {
        String start = Long.toHexString(address) + " ";
        return Files.readAllLines(Path.of("/proc/self/numa_maps")).stream().filter(l -> l.startsWith(start))
                .findFirst().orElseThrow(() -> new AssertionError("no mapping starts at " + start));
    }

    private static String policyOfANewRegion(MemserverConfig config) throws Exception {
        try (Memserver memserver = Memserver.start(config)) {
            RegionService.Session session = memserver.open(new RegionService.Credential.Token("numa"), "numa",
                    new InetSocketAddress("127.0.0.1", 1));
            try {
                RegionDescriptor region = session.allocate(RegionTag.scratch("numa"), 4 * MIB);
                try (RegionService.Pin pin = session.pin(region.id(), region.key(), 0, 4 * MIB)) {
                    pin.memory().fill((byte) 7);
                    pin.wrote();
                    return numaMapsLine(pin.memory().address());
                }
            } finally {
                session.closed();
            }
        }
    }

    @Test
    void regionsPreferTheConfiguredNode() throws Exception {
        Assumptions.assumeTrue(Files.exists(Path.of("/proc/self/numa_maps")), "a kernel without NUMA");
        MemserverConfig config = new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 64 * MIB, "numa", "local");
        int node = NumaNodes.firstAllowed();
        String placed = policyOfANewRegion(config.withNumaNode(node));
        assertEquals("prefer:" + node, placed.split(" ")[1], placed);
        assertTrue(placed.contains(" N" + node + "=1024 "), "all 1024 written pages on node " + node + ": " + placed);
        String unplaced = policyOfANewRegion(config);
        assertEquals("default", unplaced.split(" ")[1], unplaced);
    }
}
