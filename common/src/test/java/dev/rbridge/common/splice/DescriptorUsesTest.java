package dev.rbridge.common.splice;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Who releases descriptors closed while in use: the close when idle, else the last use to end. */
class DescriptorUsesTest {
    @Test
    void aCloseWhileIdleReleasesAtOnce() {
        DescriptorUses u = new DescriptorUses();
        assertEquals(DescriptorUses.Closing.RELEASE_NOW, u.close());
        assertTrue(u.released());
        assertEquals(DescriptorUses.Closing.ALREADY_CLOSED, u.close());
        assertFalse(u.enter(), "no use starts once closed");
    }

    @Test
    void aCloseDuringUsesLeavesTheReleaseToTheLastOne() {
        DescriptorUses u = new DescriptorUses();
        assertTrue(u.enter());
        assertTrue(u.enter());
        assertEquals(DescriptorUses.Closing.RELEASE_AFTER_LAST_USE, u.close());
        assertFalse(u.released());
        assertFalse(u.enter());
        assertFalse(u.exit(), "another use is still under way");
        assertTrue(u.exit(), "the last use releases");
        assertTrue(u.released());
    }

    @Test
    void usesWithoutACloseReleaseNothing() {
        DescriptorUses u = new DescriptorUses();
        assertTrue(u.enter());
        assertFalse(u.exit());
        assertFalse(u.released());
    }
}
