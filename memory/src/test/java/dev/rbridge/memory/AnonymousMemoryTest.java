package dev.rbridge.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

class AnonymousMemoryTest {

    @Test
    void residentBytesFollowWritesAndReleases() throws IOException {
        // With transparent huge pages forced on, one write may back 2 MiB: page-exact counts only hold without.
        Path thp = Path.of("/sys/kernel/mm/transparent_hugepage/enabled");
        Assumptions.assumeFalse(Files.exists(thp) && Files.readString(thp).contains("[always]"),
                "transparent huge pages are 'always' on this host");
        try (AnonymousMemory m = AnonymousMemory.map(64L << 20)) {
            assertEquals(0, m.residentBytes(), "nothing is backed before the first write");
            for (long off = 0; off < (1 << 20); off += 4096) {
                m.segment().get(ValueLayout.JAVA_BYTE, off); // maps the shared zero page: costs no RAM
            }
            assertEquals(0, m.residentBytes(), "reading unwritten memory is not resident memory");
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
}
