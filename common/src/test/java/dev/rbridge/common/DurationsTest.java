package dev.rbridge.common;

import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;

class DurationsTest {
    @Test
    void wholeSecondsInSecondsTheRestInMilliseconds() {
        assertEquals("6 s", Durations.human(Duration.ofSeconds(6)));
        assertEquals("300 ms", Durations.human(Duration.ofMillis(300)));
        assertEquals("1500 ms", Durations.human(Duration.ofMillis(1500)));
        assertEquals("0 s", Durations.human(Duration.ZERO));
    }
}
