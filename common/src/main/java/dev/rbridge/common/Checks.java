package dev.rbridge.common;

import java.time.Duration;

/** The checks every config makes of its values, written once, with one wording for the error. */
public final class Checks {
    private Checks() {}

    /** {@code d}, when it is longer than zero; otherwise "WHAT must be positive". */
    public static Duration positive(String what, Duration d) {
        if (d == null || d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(what + " must be positive" + (d == null ? "" : ": " + d));
        }
        return d;
    }

    /** {@code value}, when it is at least {@code min}; otherwise "WHAT must be at least MIN". */
    public static long atLeast(String what, long value, long min) {
        if (value < min) {
            throw new IllegalArgumentException(what + " must be at least " + min + ": " + value);
        }
        return value;
    }
}
