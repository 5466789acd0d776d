package dev.rbridge.common;

import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

class ChecksTest {
    @Test
    void aPositiveDurationPassesAndAnyOtherIsNamedInTheError() {
        assertEquals(Duration.ofMillis(1), Checks.positive("lease", Duration.ofMillis(1)));
        assertEquals("lease must be positive: PT0S", assertThrows(IllegalArgumentException.class,
                () -> Checks.positive("lease", Duration.ZERO)).getMessage());
        assertEquals("lease must be positive: PT-1S", assertThrows(IllegalArgumentException.class,
                () -> Checks.positive("lease", Duration.ofSeconds(-1))).getMessage());
        assertEquals("lease must be positive", assertThrows(IllegalArgumentException.class,
                () -> Checks.positive("lease", null)).getMessage());
    }

    @Test
    void atLeastPassesTheBoundAndNamesAValueBelowIt() {
        assertEquals(1, Checks.atLeast("workers", 1, 1));
        assertEquals("workers must be at least 1: 0", assertThrows(IllegalArgumentException.class,
                () -> Checks.atLeast("workers", 0, 1)).getMessage());
    }
}
