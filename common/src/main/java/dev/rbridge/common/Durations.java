package dev.rbridge.common;

import java.time.Duration;

/** How a limit reads in a log line or an error answer. */
public final class Durations {
    private Durations() {}

    /** {@code "6 s"} for whole seconds, {@code "300 ms"} or {@code "1500 ms"} otherwise. */
    public static String human(Duration d) {
        return d.toMillis() % 1000 == 0 ? d.toSeconds() + " s" : d.toMillis() + " ms";
    }
}
