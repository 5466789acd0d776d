package dev.rbridge.common.ffm;

import org.junit.jupiter.api.Test;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The libc binding against this host's real libc. */
class LibcTest {
    private static final int EBADF = 9;
    private static final MethodHandle CLOSE = Libc.downcall("close",
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
    private static final MethodHandle GETPID = Libc.downcallWithoutErrno("getpid",
            FunctionDescriptor.of(ValueLayout.JAVA_INT));

    @Test
    void aFailedCallGivesMinusItsErrno() {
        assertEquals(-EBADF, Libc.invoke(state -> (int) CLOSE.invokeExact(state, -1)));
        assertEquals(-EBADF, Libc.invokeUninterrupted(state -> (int) CLOSE.invokeExact(state, -1)));
    }

    @Test
    void aSucceededCallGivesItsResult() {
        int pid = Libc.call(() -> (int) GETPID.invokeExact());
        assertEquals(ProcessHandle.current().pid(), pid);
    }

    @Test
    void strerrorSaysWhatAnErrnoMeans() {
        assertEquals("Bad file descriptor", Libc.strerror(EBADF));
    }

    @Test
    void aSymbolLibcLacksIsRefusedByName() {
        UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class,
                () -> Libc.downcall("no_such_function_rbridge", FunctionDescriptor.ofVoid()));
        assertTrue(e.getMessage().contains("no_such_function_rbridge"), e.getMessage());
    }

    @Test
    void unlinkedDowncallsSayWhyAtFirstUse() {
        Libc.Linked<Object> none = Libc.Linked.of("nothing", () -> {
            throw new UnsatisfiedLinkError("libc has no nothing");
        });
        assertEquals(null, none.natives());
        Exception e = assertThrows(java.io.IOException.class, none::get);
        assertTrue(e.getMessage().startsWith("cannot call libc's nothing"), e.getMessage());
    }
}
