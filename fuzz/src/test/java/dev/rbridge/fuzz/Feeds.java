package dev.rbridge.fuzz;

import java.util.function.Supplier;

import com.code_intelligence.jazzer.api.FuzzedDataProvider;

/**
 * How a target hands its input to a decoder. The same bytes go in whole, then in two pieces cut where the fuzzer says,
 * then (for short inputs) one byte at a time: a stream decoder must return the same messages however its input
 * arrives, since a socket read may end anywhere.
 *
 * <p>Every target takes its parameters (cut position, limits) from the end of the fuzzer's input with
 * {@link FuzzedDataProvider#consumeInt()} (4 bytes each) and the stream from what is left; so a seed is a capture
 * followed by {@code 4 * n} parameter bytes ({@link #PARAMETER_BYTES}), and the capture stays at the front where the
 * fuzzer's mutations of it are meaningful.
 */
public final class Feeds {
    /** The stream is also fed a byte at a time when it is no longer than this (longer ones cost too many calls). */
    public static final int BYTEWISE_MAX = 64;

    private Feeds() {}

    /**
     * The limits up to which the input is revealed, in order; the last is always {@code length}. {@code mode} 0 is
     * whole, 1 is cut at {@code cut} (taken modulo {@code length + 1}), 2 is a byte at a time.
     */
    public static int[] limits(int mode, int length, int cut) {
        return switch (mode) {
            case 0 -> new int[]{length};
            case 1 -> new int[]{Math.floorMod(cut, length + 1), length};
            case 2 -> {
                int[] l = new int[length + 1];
                for (int i = 0; i <= length; i++) {
                    l[i] = i;
                }
                yield l;
            }
            default -> throw new IllegalArgumentException("mode " + mode);
        };
    }

    /** The feeding modes worth running for an input of this length. */
    public static int modes(int length) {
        return length <= BYTEWISE_MAX ? 3 : 2;
    }

    /** Fails the run with {@code message} unless {@code condition} holds (a finding, not an expected error). */
    public static void check(boolean condition, String message) {
        if (!condition) {
            throw new AssertionError(message);
        }
    }

    /** As {@link #check(boolean, String)}, the message built only on failure: millions of inputs pass. */
    public static void check(boolean condition, Supplier<String> message) {
        if (!condition) {
            throw new AssertionError(message.get());
        }
    }
}
