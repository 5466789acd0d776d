package dev.rbridge.memserver;

import dev.rbridge.memory.AnonymousMemory;
import dev.rbridge.memserver.NumaPlacement.Choice;
import dev.rbridge.memserver.NumaPlacement.Mode;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.InetAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The placement decision against a sysfs tree written by the test: a two-socket host with its NIC on node 1. */
class NumaPlacementTest {
    @TempDir
    Path sys;

    private static final InetAddress NIC_ADDRESS = InetAddress.ofLiteral("192.0.2.7");

    private void host(String nodesWithMemory, String nicNode) throws IOException {
        Path nodes = Files.createDirectories(sys.resolve("devices/system/node"));
        Files.writeString(nodes.resolve("has_memory"), nodesWithMemory + "\n");
        if (nicNode != null) {
            Path device = Files.createDirectories(sys.resolve("class/net/ens1f0/device"));
            Files.writeString(device.resolve("numa_node"), nicNode + "\n");
        }
    }

    private String allowed = "0-1";
    private String refusal;

    private Choice choose(Mode mode, InetAddress listen) {
        return NumaPlacement.choose(mode, listen, sys, a -> a.equals(NIC_ADDRESS) ? Optional.of("ens1f0")
                : Optional.empty(), Optional.ofNullable(allowed), node -> Optional.ofNullable(refusal));
    }

    @Test
    void autoPlacesRegionsOnTheNodeOfTheNicThatHoldsTheListenAddress() throws IOException {
        host("0-1", "1");
        Choice c = choose(Mode.AUTO, NIC_ADDRESS);
        assertEquals(1, c.node(), c.why());
        assertTrue(c.why().contains("ens1f0") && c.why().contains("node 1"), c.why());
    }

    @Test
    void autoLeavesPlacementAloneWhereNoNicSaysWhere() throws IOException {
        host("0-1", "1");
        assertEquals(AnonymousMemory.ANY_NODE, choose(Mode.AUTO, InetAddress.ofLiteral("0.0.0.0")).node());
        assertEquals(AnonymousMemory.ANY_NODE, choose(Mode.AUTO, InetAddress.ofLiteral("198.51.100.1")).node());
        assertEquals(AnonymousMemory.ANY_NODE, choose(Mode.AUTO, null).node());
        host("0-1", "-1"); // what firmware without proximity information reports
        Choice unknown = choose(Mode.AUTO, NIC_ADDRESS);
        assertEquals(AnonymousMemory.ANY_NODE, unknown.node());
        assertTrue(unknown.why().contains("-1"), unknown.why());
        host("0,2", "1"); // a node without memory (a CPU-only or offline node) is no place for regions
        assertEquals(AnonymousMemory.ANY_NODE, choose(Mode.AUTO, NIC_ADDRESS).node());
    }

    @Test
    void aVirtioNicsNodeIsItsPciFunctions() throws IOException {
        // As sysfs lays out a virtio NIC: class/net/IF/device is the virtio device, the PCI function above it has the
        // node.
        host("0-1", null);
        Path pci = Files.createDirectories(sys.resolve("devices/pci0000:40/0000:40:00.0/0000:41:00.0"));
        Files.writeString(pci.resolve("numa_node"), "1\n");
        Path virtio = Files.createDirectories(pci.resolve("virtio4"));
        Files.createDirectories(sys.resolve("class/net/ens1f0"));
        Files.createSymbolicLink(sys.resolve("class/net/ens1f0/device"), virtio);
        Choice c = choose(Mode.AUTO, NIC_ADDRESS);
        assertEquals(1, c.node(), c.why());
    }

    @Test
    void autoOnOneNodeDoesNothing() throws IOException {
        host("0", "0");
        Choice c = choose(Mode.AUTO, NIC_ADDRESS);
        assertEquals(AnonymousMemory.ANY_NODE, c.node());
        assertTrue(c.why().contains("one NUMA node"), c.why());
    }

    @Test
    void anInterfaceWithoutADeviceIsNamedInTheReason() throws IOException {
        host("0-1", null);
        Choice c = choose(Mode.AUTO, NIC_ADDRESS);
        assertEquals(AnonymousMemory.ANY_NODE, c.node());
        assertTrue(c.why().contains("not a PCI device"), c.why());
    }

    @Test
    void anExplicitNodeMustHaveMemory() throws IOException {
        host("0-1", "1");
        assertEquals(0, choose(Mode.parse("0"), NIC_ADDRESS).node());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> choose(Mode.parse("3"), NIC_ADDRESS));
        assertTrue(e.getMessage().contains("nodes 0-1 only"), e.getMessage());
        assertEquals(AnonymousMemory.ANY_NODE, choose(Mode.OFF, NIC_ADDRESS).node());
    }

    @Test
    void aNodeThisProcessMayNotUseOrCannotPlaceOnIsDroppedByAutoAndRefusedWhenAsked() throws IOException {
        host("0-1", "1");
        allowed = "0"; // a cpuset without the NIC's node
        Choice c = choose(Mode.AUTO, NIC_ADDRESS);
        assertEquals(AnonymousMemory.ANY_NODE, c.node());
        assertTrue(c.why().contains("auto chose node 1") && c.why().contains("Mems_allowed_list"), c.why());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> choose(Mode.parse("1"), NIC_ADDRESS));
        assertTrue(e.getMessage().startsWith("--numa-node 1: this process may use nodes 0 only"), e.getMessage());

        allowed = null; // unknown: the trial placement decides
        refusal = "mbind to NUMA node 1 failed: errno 1 (EPERM: ...)";
        Choice refused = choose(Mode.AUTO, NIC_ADDRESS);
        assertEquals(AnonymousMemory.ANY_NODE, refused.node());
        assertTrue(refused.why().contains("EPERM"), refused.why());
        e = assertThrows(IllegalArgumentException.class, () -> choose(Mode.parse("1"), NIC_ADDRESS));
        assertTrue(e.getMessage().contains("EPERM"), e.getMessage());
    }

    @Test
    void modesParseStrictly() {
        assertEquals(Mode.AUTO, Mode.parse(" AUTO "));
        assertEquals(Mode.OFF, Mode.parse("off"));
        assertEquals(7, Mode.parse("7").node());
        for (String bad : new String[]{"", "-1", "1024", "one", "0x1", "99999999999"}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Mode.parse(bad), bad);
            assertTrue(e.getMessage().startsWith("--numa-node takes"), e.getMessage());
        }
    }

    @Test
    void kernelNodeListsAreReadAsTheKernelWritesThem() {
        assertTrue(NumaPlacement.contains("0-3,8", 2));
        assertTrue(NumaPlacement.contains("0-3,8", 8));
        assertFalse(NumaPlacement.contains("0-3,8", 5));
        assertEquals(5, NumaPlacement.count("0-3,8"));
        assertEquals(0, NumaPlacement.count("3-1"));
        assertEquals(0, NumaPlacement.count("0-"));
        assertEquals(0, NumaPlacement.count("0-2000"));
        assertEquals(0, NumaPlacement.count(""));
    }

    @Test
    void loopbackIsNoNic() {
        // On this host's own sysfs and interfaces: loopback has no device, whatever the host's nodes.
        Choice c = NumaPlacement.choose(Mode.AUTO, InetAddress.getLoopbackAddress());
        assertEquals(AnonymousMemory.ANY_NODE, c.node(), c.why());
    }
}
