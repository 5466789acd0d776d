package dev.rbridge.rdma.ucx;

import dev.rbridge.common.ffm.Libc;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/**
 * Run in a JVM of its own by {@link UcxSignalHandlersTest}: prints the address of the SIGSEGV handler before and after
 * the ucx tests' check that UCX is installed (which opens libucp), as {@code before=0x... after=0x...}.
 */
final class SigsegvHandlerProbe {
    private static final int SIGSEGV = 11;
    /** glibc's struct sigaction on x86-64 and aarch64 is 152 bytes; sa_handler is its first member. */
    private static final long SIGACTION_SIZE = 152;
    private static final MethodHandle SIGACTION = Libc.downcallWithoutErrno("sigaction",
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.ADDRESS,
                    ValueLayout.ADDRESS));

    private SigsegvHandlerProbe() {}

    public static void main(String[] args) throws Throwable {
        long before = handler();
        boolean present = UcxPresent.present();
        long after = handler();
        System.out.printf("present=%b before=0x%x after=0x%x%n", present, before, after);
    }

    private static long handler() throws Throwable {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment old = a.allocate(SIGACTION_SIZE, 8);
            int rc = (int) SIGACTION.invokeExact(SIGSEGV, MemorySegment.NULL, old);
            if (rc != 0) {
                throw new IllegalStateException("sigaction(SIGSEGV) failed");
            }
            return old.get(ValueLayout.JAVA_LONG, 0);
        }
    }
}
