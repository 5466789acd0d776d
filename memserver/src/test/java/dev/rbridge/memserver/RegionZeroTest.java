package dev.rbridge.memserver;

import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RegionTag;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * ZERO in the memserver's region layer, the one place that decides it for every transport: whole pages go back to the
 * system, except while a device holds the region's pages (an RDMA registration), where the range is filled instead;
 * and memory written without reporting (one-sided RDMA) is zeroed however its pages were given back before.
 */
class RegionZeroTest {
    static final long MIB = 1 << 20;
    static final long PAGE = 4096;
    Memserver memserver;
    RegionService.Session session;
    RegionDescriptor region;

    @BeforeEach
    void start() throws Exception {
        memserver = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 64 * MIB, "zero",
                "local"));
        session = memserver.open(new RegionService.Credential.Token("zero"), "zero-rule",
                new InetSocketAddress("127.0.0.1", 1));
        region = session.allocate(RegionTag.scratch("zero-rule"), 4 * MIB);
    }

    @AfterEach
    void stop() {
        session.closed();
        memserver.close();
    }

    RegionService.Pin pin(long offset, long length) throws Exception {
        return session.pin(region.id(), region.key(), offset, length);
    }

    void write(long offset, long length, byte value) throws Exception {
        try (RegionService.Pin p = pin(offset, length)) {
            p.memory().fill(value);
            p.wrote();
        }
    }

    static void assertAll(MemorySegment s, byte expected, String what) {
        for (long i = 0; i < s.byteSize(); i++) {
            if (s.get(ValueLayout.JAVA_BYTE, i) != expected) {
                throw new AssertionError(what + ": byte " + i + " is " + s.get(ValueLayout.JAVA_BYTE, i));
            }
        }
    }

    long resident() {
        return memserver.stats().residentBytes();
    }

    @Test
    void zeroGivesWholePagesBackUnlessADeviceHoldsTheRegion() throws Exception {
        write(0, MIB, (byte) 0x5A);
        long written = resident();
        assertTrue(written >= MIB, "1 MiB written backs " + written + " bytes");

        RegionService.Pin device = pin(0, 4 * MIB);
        device.heldByDevice(); // an RDMA registration of the whole region
        session.zero(region.id(), region.key(), 0, MIB);
        assertEquals(written, resident(), "pages a NIC holds must stay the process's pages");
        assertAll(device.memory().asSlice(0, MIB), (byte) 0, "filled with zeroes where the device sees them");

        device.memory().asSlice(0, MIB).fill((byte) 0x66); // the NIC writes again, one-sided
        device.close(); // deregistered: nothing holds the pages any more
        session.zero(region.id(), region.key(), 0, MIB);
        assertTrue(written - resident() >= MIB, "ZERO gave back " + (written - resident()) + " bytes of 1 MiB");
        try (RegionService.Pin p = pin(0, MIB)) {
            assertAll(p.memory(), (byte) 0, "zeroed");
        }
    }

    @Test
    void memoryWrittenWithoutReportingIsZeroedEvenAfterItsPagesWentBack() throws Exception {
        try (RegionService.Pin exposed = pin(0, 4 * MIB)) {
            exposed.exposed(); // registered for one-sided writes that pin nothing (UCX over tcp)
            MemorySegment m = exposed.memory();
            m.asSlice(0, 3 * PAGE).fill((byte) 0x5A); // one-sided: the memserver is not told
            session.zero(region.id(), region.key(), 10, 2 * PAGE);
            assertAll(m.asSlice(10, 2 * PAGE), (byte) 0, "the zeroed range");
            assertEquals(0x5A, m.get(ValueLayout.JAVA_BYTE, 9));
            assertEquals(0x5A, m.get(ValueLayout.JAVA_BYTE, 2 * PAGE + 10));

            m.asSlice(PAGE, PAGE).fill((byte) 0x77); // the page that went back is written again, one-sided
            session.zero(region.id(), region.key(), PAGE + 5, 10); // inside that page: filled, not given back
            assertAll(m.asSlice(PAGE + 5, 10), (byte) 0, "part of a page written after it went back");
            assertEquals(0x77, m.get(ValueLayout.JAVA_BYTE, PAGE + 4));
        }
    }
}
