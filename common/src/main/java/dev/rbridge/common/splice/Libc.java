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
