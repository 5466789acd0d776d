package dev.rbridge.common.ffm;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.util.Arrays;
import java.util.function.Supplier;

/**
 * The project's one binding of libc through FFM: the linker and its lookup, errno capture, the downcall handles made
 * from them, and calls that turn {@link MethodHandle#invokeExact}'s {@code Throwable} into nothing checked. Every class
 * that calls libc makes its handles here ({@link #downcall}) and runs them through {@link #call} or {@link #invoke}.
 */
public final class Libc {
    public static final int EINTR = 4;
    public static final int EAGAIN = 11;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final Linker.Option ERRNO_CAPTURE = Linker.Option.captureCallState("errno");
    /** What a downcall made by {@link #downcall} takes as its first argument, for errno. */
    private static final StructLayout CALL_STATE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CALL_STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final Linked<MethodHandle> STRERROR = Linked.of("strerror",
            () -> downcallWithoutErrno("strerror", FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.JAVA_INT)));

    private Libc() {}

    /**
     * A handle on libc's {@code symbol} that captures errno: its first argument is a segment of {@link #callState},
     * which {@link #errno} reads after the call. {@code options} as {@link Linker#downcallHandle} takes them (a
     * variadic function's {@link Linker.Option#firstVariadicArg}).
     */
    public static MethodHandle downcall(String symbol, FunctionDescriptor function, Linker.Option... options) {
        Linker.Option[] all = Arrays.copyOf(options, options.length + 1);
        all[options.length] = ERRNO_CAPTURE;
        return LINKER.downcallHandle(find(symbol), function, all);
    }

    /** A handle on libc's {@code symbol} without errno: for calls whose failure says all in its result. */
    public static MethodHandle downcallWithoutErrno(String symbol, FunctionDescriptor function,
            Linker.Option... options) {
        return LINKER.downcallHandle(find(symbol), function, options);
    }

    private static MemorySegment find(String symbol) {
        return LINKER.defaultLookup().find(symbol).orElseThrow(() -> new UnsatisfiedLinkError("libc has no " + symbol));
    }

    /** A segment of {@code arena} for a {@link #downcall} handle's errno. */
    public static MemorySegment callState(Arena arena) {
        return arena.allocate(CALL_STATE);
    }

    /** The errno a {@link #downcall} handle left in {@code state}. */
    public static int errno(MemorySegment state) {
        return (int) ERRNO.get(state, 0L);
    }

    /** The C library's sentence for an errno value, or "errno N" when it has none to give. */
    public static String strerror(int errno) {
        MethodHandle h = STRERROR.natives();
        if (h == null) {
            return "errno " + errno;
        }
        MemorySegment s = call(() -> (MemorySegment) h.invokeExact(errno));
        return s.equals(MemorySegment.NULL) ? "errno " + errno : s.reinterpret(256).getString(0);
    }

    /** A downcall; {@link MethodHandle#invokeExact} declares Throwable, which libc calls never throw. */
    @FunctionalInterface
    public interface Call<T> {
        T run() throws Throwable;
    }

    /** Runs {@code c}: its result, with what it throws unchecked as it was and anything checked wrapped. */
    public static <T> T call(Call<T> c) {
        try {
            return c.run();
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }

    /** A {@link #downcall} handle's call given the segment for its errno; returns the C result, widened. */
    @FunctionalInterface
    public interface ErrnoCall {
        long run(MemorySegment state) throws Throwable;
    }

    /**
     * Runs {@code c} with an errno segment of its own: the C result, or {@code -errno} when it is negative (the
     * kernel's convention, so a caller can say which call failed and why).
     */
    public static long invoke(ErrnoCall c) {
        return invoke(c, false);
    }

    /** As {@link #invoke}, the call made again for as long as it fails with EINTR (a signal came). */
    public static long invokeUninterrupted(ErrnoCall c) {
        return invoke(c, true);
    }

    private static long invoke(ErrnoCall c, boolean retryInterrupted) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = callState(arena);
            while (true) {
                long r = c.run(state);
                if (r >= 0) {
                    return r;
                }
                int e = errno(state);
                if (e != EINTR || !retryInterrupted) {
                    return e > 0 ? -e : r;
                }
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) { // as call: libc calls throw nothing checked
            throw new IllegalStateException(t);
        }
    }

    /**
     * A class's downcalls, or why they could not be linked (no native access, not Linux): linked once, when the class
     * loads, so that a host without them gets a sentence at the first use instead of an error at class loading.
     */
    public record Linked<T>(T natives, String unlinked) {
        /** {@code load}'s downcalls, or the sentence saying why {@code what} (libc's functions so named) failed. */
        public static <T> Linked<T> of(String what, Supplier<T> load) {
            try {
                return new Linked<>(load.get(), null);
            } catch (RuntimeException | LinkageError e) {
                return new Linked<>(null, "cannot call libc's " + what + ": " + e + " (they need native access, "
                        + "--enable-native-access=ALL-UNNAMED, and Linux)");
            }
        }

        /** The downcalls, or an IOException saying why there are none. */
        public T get() throws IOException {
            if (natives == null) {
                throw new IOException(unlinked);
            }
            return natives;
        }
    }
}
