package dev.rbridge.memserver;

import dev.rbridge.memserver.HugePages.Choice;
import dev.rbridge.memserver.HugePages.Mode;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** auto: huge pages where an RDMA NIC pins region memory and the pool covers the capacity; on and off as asked. */
class HugePagesTest {
    private static final long MIB = 1 << 20;

    @Test
    void autoUsesHugePagesOnlyWhereANicPinsRegionsAndThePoolCoversTheCapacity() {
        Choice pinnedAndRoom = HugePages.choose(Mode.AUTO, true, 1024 * MIB, 1024 * MIB);
        assertTrue(pinnedAndRoom.use(), pinnedAndRoom.why());
        Choice notPinned = HugePages.choose(Mode.AUTO, false, 4096 * MIB, 1024 * MIB);
        assertFalse(notPinned.use());
        assertTrue(notPinned.why().contains("no RDMA NIC"), notPinned.why());
        // 1 byte over 1 GiB needs 513 huge pages: the pool's 512 do not cover it, and the log says what to reserve
        Choice short1 = HugePages.choose(Mode.AUTO, true, 1024 * MIB, 1024 * MIB + 1);
        assertFalse(short1.use());
        assertTrue(short1.why().contains("Reserve 513 with sysctl vm.nr_hugepages"), short1.why());
        assertTrue(short1.why().contains("--huge-pages off"), short1.why());
    }

    @Test
    void onAndOffAreTakenAsAsked() {
        assertTrue(HugePages.choose(Mode.ON, false, 0, 1024 * MIB).use(), "on: a grant the pool cannot cover is "
                + "refused later, with the reason");
        assertFalse(HugePages.choose(Mode.OFF, true, 4096 * MIB, 1024 * MIB).use());
    }

    @Test
    void theModeIsAutoOnOrOffInAnyCase() {
        assertEquals(Mode.AUTO, Mode.parse(" Auto"));
        assertEquals(Mode.ON, Mode.parse("on"));
        assertEquals(Mode.OFF, Mode.parse("OFF"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Mode.parse("yes"));
        assertTrue(e.getMessage().contains("auto, on or off"), e.getMessage());
    }

    @Test
    void thePoolIsReadFromMeminfo() {
        assertEquals(512 * 2 * MIB, HugePages.freeHugePageBytes(List.of("MemTotal:       24576000 kB",
                "HugePages_Total:     600", "HugePages_Free:      512", "Hugepagesize:       2048 kB")));
        assertEquals(0, HugePages.freeHugePageBytes(List.of("HugePages_Free:      512",
                "Hugepagesize:    1048576 kB")), "1 GiB default pages are not what the memserver maps");
        assertEquals(0, HugePages.freeHugePageBytes(List.of("Hugepagesize:       2048 kB")), "no free count");
        assertEquals(0, HugePages.freeHugePageBytes(List.of("HugePages_Free: lots", "Hugepagesize: 2048 kB")));
        Choice here = HugePages.choose(Mode.AUTO, "tcp", 64 * MIB);
        assertFalse(here.use(), "tcp pins nothing: " + here.why());
    }
}
