package dev.rbridge.bridge.volume;

import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The states' lowercase forms are what admin JSON, metric labels and logs have always shown: operators rely on them. */
class StateLabelsTest {
    @Test
    void slabStatesKeepTheirWireForms() {
        assertEquals(List.of("unallocated", "healthy", "degraded", "rebuilding", "lost"),
                Arrays.stream(SlabState.values()).map(SlabState::label).toList());
    }

    @Test
    void volumeStatesKeepTheirWireForms() {
        assertEquals(List.of("healthy", "degraded", "rebuilding", "lost", "fenced"),
                Arrays.stream(VolumeState.values()).map(VolumeState::label).toList());
    }

    @Test
    void aVolumeStatusCountsItsSlabsByState() {
        Volume.VolumeStatus s = new Volume.VolumeStatus("disk", 100, 10, 2, VolumeState.LOST, 10, 9, 5, 2, 1, 1);
        assertEquals(1, s.count(SlabState.UNALLOCATED), "slabs less allocated");
        assertEquals(5, s.count(SlabState.HEALTHY));
        assertEquals(2, s.count(SlabState.DEGRADED));
        assertEquals(1, s.count(SlabState.REBUILDING));
        assertEquals(1, s.count(SlabState.LOST));
    }
}
