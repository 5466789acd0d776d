package dev.rbridge.memory;

import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The I/O flusher state is granted exactly where the kernel's capability check says it is, and reaches the threads a
 * flagged thread creates afterwards; the flags word of a thread is read from /proc whatever its name holds. (mlockall
 * is checked on a process of its own, {@code SwapSafetyOptionsTest} in cli: locking the test JVM would lock every
 * later test's memory too.)
 */
class SwapSafetyTest {

    @Test
    void theFlusherStateIsSetWherePermittedAndInheritedByLaterThreads() throws Exception {
        AtomicReference<Throwable> failure = new AtomicReference<>();
        AtomicBoolean self = new AtomicBoolean();
        AtomicBoolean child = new AtomicBoolean();
        AtomicBoolean flagsInProc = new AtomicBoolean();
        Thread t = new Thread(() -> {
            try {
                SwapSafety.markIoFlusher();
                self.set(SwapSafety.isIoFlusher());
                long tid =
                        Long.parseLong(Files.readSymbolicLink(Path.of("/proc/thread-self")).getFileName().toString());
                flagsInProc.set((SwapSafety.threadFlags(Path.of("/proc/self/task/" + tid + "/stat"))
                        & SwapSafety.PF_MEMALLOC_NOIO) != 0);
                Thread c = new Thread(() -> child.set(SwapSafety.isIoFlusher()));
                c.start();
                c.join();
            } catch (Throwable e) {
                failure.set(e);
            }
        });
        t.start();
        t.join();
        if (SwapSafety.hasEffectiveCapability(SwapSafety.CAP_SYS_RESOURCE)) {
            assertEquals(null, failure.get());
            assertTrue(self.get(), "PR_GET_IO_FLUSHER after setting it");
            assertTrue(flagsInProc.get(), "PF_MEMALLOC_NOIO in the thread's /proc flags");
            assertTrue(child.get(), "a thread created after inherits the state");
        } else {
            assertTrue(failure.get() instanceof IllegalStateException, String.valueOf(failure.get()));
            assertTrue(failure.get().getMessage().contains("CAP_SYS_RESOURCE"), failure.get().getMessage());
        }
        assertFalse(SwapSafety.isIoFlusher(), "the test thread, which set nothing, is not a flusher");
    }

    @Test
    void threadFlagsAreReadPastANameWithSpacesAndParentheses() throws Exception {
        Path stat = Files.createTempFile("stat", "");
        Files.writeString(stat, "4242 (a) b (c)) S 1 4242 4242 0 -1 4719680 9 0 0 0\n");
        assertEquals(4719680L, SwapSafety.threadFlags(stat));
        assertThrows(NumberFormatException.class, () -> {
            Files.writeString(stat, "4242 (x) S 1 2 3 4 5 nope\n");
            SwapSafety.threadFlags(stat);
        });
    }

    @Test
    void theMemlockLimitIsReadFromProc() {
        String limit = SwapSafety.memlockLimit();
        assertTrue(limit.equals("unlimited") || limit.matches("\\d+ bytes"), limit);
    }
}
