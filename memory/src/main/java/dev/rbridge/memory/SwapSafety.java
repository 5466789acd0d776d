package dev.rbridge.memory;

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
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * What a process that serves a block device (or keeps one attached) needs so the machine can swap onto that device
 * without deadlocking. Swapping out a page means writing it to the device, that is, asking this process; if this
 * process must itself wait for memory to be reclaimed before it can answer (one of its own pages was swapped out, or
 * an allocation entered reclaim that writes to the device), nobody ever answers.
 *
 * <ul>
 *   <li>{@link #lockAllMemory}: {@code mlockall(MCL_CURRENT | MCL_FUTURE)}: every page mapped now or later stays in
 *       RAM, so serving a request never faults a page back in from swap.</li>
 *   <li>{@link #markIoFlusher}: {@code prctl(PR_SET_IO_FLUSHER)} (Linux 5.6): the kernel treats the calling thread,
 *       and every thread it creates from then on, as part of the I/O path: its allocations never wait on I/O
 *       (GFP_NOIO) and it is not throttled behind the dirty pages it is there to clean. The flag is per thread and
 *       inherited at thread creation, so it must be set before the process starts its I/O threads.</li>
 * </ul>
 */
public final class SwapSafety {
    private static final int MCL_CURRENT = 1;
    private static final int MCL_FUTURE = 2;
    private static final int PR_SET_IO_FLUSHER = 57;
    private static final int PR_GET_IO_FLUSHER = 58;
    private static final int EPERM = 1;
    private static final int ENOMEM = 12;
    private static final int EAGAIN = 11;
    private static final int EINVAL = 22;
    /** PF_MEMALLOC_NOIO in a task's flags (the ninth field of /proc/PID/task/TID/stat): what the flusher state sets. */
    public static final long PF_MEMALLOC_NOIO = 0x00080000L;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final StructLayout CALL_STATE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CALL_STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final MethodHandle MLOCKALL = downcall("mlockall",
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
    private static final MethodHandle PRCTL = downcall("prctl", FunctionDescriptor.of(ValueLayout.JAVA_INT,
            ValueLayout.JAVA_INT, ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG,
            ValueLayout.JAVA_LONG));

    private SwapSafety() {}

    private static MethodHandle downcall(String name, FunctionDescriptor descriptor) {
        return LINKER.downcallHandle(LINKER.defaultLookup().find(name)
                .orElseThrow(() -> new UnsatisfiedLinkError("libc has no " + name)),
                descriptor, Linker.Option.captureCallState("errno"));
    }

    /**
     * Locks every page of the process in RAM, now and as it maps more.
     *
     * @throws IllegalStateException saying what the system refused and what to change
     */
    public static void lockAllMemory() {
        int errno;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(CALL_STATE);
            errno = (int) MLOCKALL.invokeExact(state, MCL_CURRENT | MCL_FUTURE) == 0 ? 0 : errno(state);
        } catch (Throwable t) {
            throw new IllegalStateException("mlockall failed", t);
        }
        if (errno == 0) {
            return;
        }
        throw new IllegalStateException("mlockall(MCL_CURRENT|MCL_FUTURE) failed: " + switch (errno) {
            case ENOMEM, EAGAIN -> "errno " + errno + ", the memlock limit (" + memlockLimit() + ") is below what "
                    + "the process maps: raise it (ulimit -l unlimited, systemd LimitMEMLOCK=infinity) or run with "
                    + "CAP_IPC_LOCK";
            case EPERM -> "errno 1, not permitted: needs CAP_IPC_LOCK or a memlock limit (ulimit -l) that covers the "
                    + "process";
            default -> "errno " + errno;
        });
    }

    /**
     * Puts the calling thread, and the threads it creates from now on, in the kernel's I/O flusher state.
     *
     * @throws IllegalStateException saying why not (the capability it needs, or a kernel without the call)
     */
    public static void markIoFlusher() {
        int errno;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(CALL_STATE);
            errno = (int) PRCTL.invokeExact(state, PR_SET_IO_FLUSHER, 1L, 0L, 0L, 0L) == 0 ? 0 : errno(state);
        } catch (Throwable t) {
            throw new IllegalStateException("prctl(PR_SET_IO_FLUSHER) failed", t);
        }
        if (errno == 0) {
            return;
        }
        throw new IllegalStateException("prctl(PR_SET_IO_FLUSHER) failed: " + switch (errno) {
            case EPERM -> "errno 1, not permitted: needs CAP_SYS_RESOURCE (run as root, or systemd "
                    + "AmbientCapabilities=CAP_SYS_RESOURCE)";
            case EINVAL -> "errno 22, this kernel does not have it (Linux 5.6 or newer does)";
            default -> "errno " + errno;
        });
    }

    /** Whether the calling thread is in the I/O flusher state. */
    public static boolean isIoFlusher() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(CALL_STATE);
            int r = (int) PRCTL.invokeExact(state, PR_GET_IO_FLUSHER, 0L, 0L, 0L, 0L);
            return r == 1;
        } catch (Throwable t) {
            throw new IllegalStateException("prctl(PR_GET_IO_FLUSHER) failed", t);
        }
    }

    private static int errno(MemorySegment state) {
        return Math.max(1, (int) ERRNO.get(state, 0L));
    }

    /** CAP_IPC_LOCK: mlock beyond the memlock limit. */
    public static final int CAP_IPC_LOCK = 14;
    /** CAP_SYS_RESOURCE: what PR_SET_IO_FLUSHER needs. */
    public static final int CAP_SYS_RESOURCE = 24;

    /** Whether this process holds capability {@code cap} in its effective set (/proc/self/status, CapEff). */
    public static boolean hasEffectiveCapability(int cap) throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("CapEff:")) {
                return (Long.parseUnsignedLong(line.substring("CapEff:".length()).trim(), 16) & (1L << cap)) != 0;
            }
        }
        throw new IOException("no CapEff line in /proc/self/status");
    }

    /** The soft "Max locked memory" limit from /proc/self/limits, as the kernel words it. */
    static String memlockLimit() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/limits"))) {
                if (line.startsWith("Max locked memory")) {
                    String[] f = line.substring("Max locked memory".length()).trim().split("\\s+");
                    return f[0].equals("unlimited") ? "unlimited" : f[0] + " bytes";
                }
            }
        } catch (IOException | RuntimeException e) {
            return "unknown";
        }
        return "unknown";
    }

    /**
     * The kernel's flags word of one thread of this process ({@code /proc/self/task/TID/stat}, field 9), for checking
     * which threads are in the flusher state ({@link #PF_MEMALLOC_NOIO}).
     */
    public static long threadFlags(Path statFile) throws IOException {
        String stat = Files.readString(statFile);
        // The name (field 2) is in parentheses and may hold spaces or ')': the fields after it follow the last ')'.
        String[] rest = stat.substring(stat.lastIndexOf(')') + 2).trim().split(" ");
        return Long.parseLong(rest[6]); // rest[0] is field 3 (state): flags is field 9
    }
}
