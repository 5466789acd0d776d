package dev.rbridge.common.splice;

import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;

/** What the package's downcalls share: the linker, errno capture, and a call that rethrows nothing checked. */
final class Libc {
    static final Linker LINKER = Linker.nativeLinker();
    static final Linker.Option ERRNO_CAPTURE = Linker.Option.captureCallState("errno");
    static final StructLayout CALL_STATE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CALL_STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    static final int EINTR = 4;
    static final int EAGAIN = 11;

    private Libc() {
    }

    static MemorySegment find(String symbol) {
        return LINKER.defaultLookup().find(symbol).orElseThrow(() -> new UnsatisfiedLinkError("no " + symbol));
    }

    static int errno(MemorySegment state) {
        return (int) ERRNO.get(state, 0L);
    }

    /** A downcall; {@link MethodHandle#invokeExact} declares Throwable, which libc calls never throw. */
    @FunctionalInterface
    interface Call<T> {
        T run() throws Throwable;
    }

    /**
     * A class's downcalls, or why they could not be linked (no native access, not Linux): linked once, when the class
     * loads, so that a host without them gets a sentence at the first use instead of an error at class loading.
     */
    record Linked<T>(T natives, String unlinked) {
        static <T> Linked<T> of(String what, java.util.function.Supplier<T> load) {
            try {
                return new Linked<>(load.get(), null);
            } catch (RuntimeException | LinkageError e) {
                return new Linked<>(null, "cannot call libc's " + what + ": " + e + " (they need native access, "
                        + "--enable-native-access=ALL-UNNAMED, and Linux)");
            }
        }

        /** The downcalls, or an IOException saying why there are none. */
        T get() throws java.io.IOException {
            if (natives == null) {
                throw new java.io.IOException(unlinked);
            }
            return natives;
        }
    }

    static <T> T call(Call<T> c) {
        try {
            return c.run();
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }
}
