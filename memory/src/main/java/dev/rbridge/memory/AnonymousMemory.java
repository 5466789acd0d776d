package dev.rbridge.memory;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * A private anonymous mapping (Linux {@code mmap}): address space is reserved up front, the kernel backs a page with
 * RAM only when it is first touched, and {@link #release} hands pages back ({@code MADV_DONTNEED}), after which they
 * read as zeroes. This is what makes an export of any size cost only the memory actually written, provided readers
 * leave pages never written alone: on some kernels a read fault backs a page too, so {@link #writtenPages} says which
 * pages hold data, and the owner marks them as it writes.
 */
public final class AnonymousMemory implements AutoCloseable {
    public static final int PAGE_SIZE = 4096;

    private static final int PROT_READ = 1;
    private static final int PROT_WRITE = 2;
    private static final int MAP_PRIVATE = 0x02;
    private static final int MAP_ANONYMOUS = 0x20;
    private static final int MAP_NORESERVE = 0x4000;
    private static final int MADV_DONTNEED = 4;
    private static final int MAP_HUGETLB = 0x40000;
    private static final int MLOCK_ONFAULT = 1;
    public static final long HUGE_PAGE_SIZE = 2L << 20;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final StructLayout CALL_STATE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CALL_STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final MethodHandle MMAP = downcall("mmap", FunctionDescriptor.of(ValueLayout.ADDRESS,
            ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
            ValueLayout.JAVA_INT,
            ValueLayout.JAVA_LONG));
    private static final MethodHandle MUNMAP = downcall("munmap", FunctionDescriptor.of(ValueLayout.JAVA_INT,
            ValueLayout.ADDRESS, ValueLayout.JAVA_LONG));
    private static final MethodHandle MADVISE = downcall("madvise", FunctionDescriptor.of(ValueLayout.JAVA_INT,
            ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT));
    private static final MethodHandle MLOCK2 = downcall("mlock2", FunctionDescriptor.of(ValueLayout.JAVA_INT,
            ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT));
    /** mbind is a system call libc does not wrap (libnuma does); the call goes through syscall(2). */
    private static final long SYS_MBIND = switch (System.getProperty("os.arch")) {
        case "amd64", "x86_64" -> 237;
        case "aarch64" -> 235;
        default -> -1; // placement is refused, with the reason, where the number is not known
    };
    private static final long MPOL_PREFERRED = 1;
    private static final MethodHandle SYSCALL6 = LINKER.downcallHandle(LINKER.defaultLookup().find("syscall")
            .orElseThrow(() -> new UnsatisfiedLinkError("libc has no syscall")),
            FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG, ValueLayout.ADDRESS,
                    ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG,
                    ValueLayout.JAVA_LONG),
            Linker.Option.firstVariadicArg(1), Linker.Option.captureCallState("errno"));
    /** {@link #map(long, boolean, boolean, int)}'s node for "wherever the kernel's default policy puts pages". */
    public static final int ANY_NODE = -1;
    /** The kernel's own ceiling on NUMA nodes (CONFIG_NODES_SHIFT is at most 10). */
    public static final int MAX_NUMA_NODES = 1024;

    private final MemorySegment segment;
    private final long pageSize;
    private final WrittenPages writtenPages;
    private volatile boolean closed;

    private AnonymousMemory(MemorySegment segment, long pageSize) {
        this.segment = segment;
        this.pageSize = pageSize;
        this.writtenPages = new WrittenPages(segment.byteSize());
    }

    private static MethodHandle downcall(String name, FunctionDescriptor descriptor) {
        return LINKER.downcallHandle(LINKER.defaultLookup().find(name)
                .orElseThrow(() -> new UnsatisfiedLinkError("libc has no " + name)),
                descriptor, Linker.Option.captureCallState("errno"));
    }

    /** Reserves {@code length} bytes (rounded up to whole pages) of zero-filled, lazily backed memory. */
    public static AnonymousMemory map(long length) {
        return map(length, false, false);
    }

    /**
     * Like {@link #map(long)}, optionally from the kernel's huge page pool (2 MiB pages; the pool is sized by
     * {@code vm.nr_hugepages}) and optionally locked so it is never swapped, page by page as it is first touched
     * ({@code mlock2(MLOCK_ONFAULT)}: locking does not make the memory resident up front).
     *
     * @throws IllegalStateException with a sentence saying what the system refused and what to change
     */
    public static AnonymousMemory map(long length, boolean hugePages, boolean lock) {
        return map(length, hugePages, lock, ANY_NODE);
    }

    /**
     * Like {@link #map(long, boolean, boolean)}, with its pages taken from NUMA node {@code preferredNode} while that
     * node has free memory, and from the others after that ({@code mbind(MPOL_PREFERRED)}, set before any page is
     * touched): where an RDMA NIC serves the memory, pages on the NIC's own node spare every transfer a hop across
     * the sockets' interconnect. Preferred rather than bound so that a full node slows the memory, not kill the
     * process. {@link #ANY_NODE} leaves the kernel's default policy.
     *
     * @throws IllegalArgumentException for a node below {@link #ANY_NODE} or from {@link #MAX_NUMA_NODES}
     * @throws IllegalStateException with a sentence saying what the system refused and what to change
     */
    public static AnonymousMemory map(long length, boolean hugePages, boolean lock, int preferredNode) {
        if (preferredNode < ANY_NODE || preferredNode >= MAX_NUMA_NODES) {
            throw new IllegalArgumentException("no NUMA node " + preferredNode + " (nodes are 0 to "
                    + (MAX_NUMA_NODES - 1) + ")");
        }
        long page = hugePages ? HUGE_PAGE_SIZE : PAGE_SIZE;
        long rounded = (length + page - 1) & -page;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(CALL_STATE);
            // Huge pages are reserved from the pool at mmap time (no MAP_NORESERVE): an empty pool fails here, with a
            // reason, instead of killing the process with SIGBUS at the first write.
            int flags = MAP_PRIVATE | MAP_ANONYMOUS | (hugePages ? MAP_HUGETLB : MAP_NORESERVE);
            MemorySegment address = (MemorySegment) MMAP.invokeExact(state, MemorySegment.NULL, rounded,
                    PROT_READ | PROT_WRITE, flags, -1, 0L);
            if (address.address() == -1L) {
                int errno = (int) ERRNO.get(state, 0L);
                throw new IllegalStateException("mmap of " + rounded + " bytes failed: errno " + errno + (errno != 12
                        ? ""
                        : hugePages ? " (ENOMEM: not enough free huge pages; raise vm.nr_hugepages, see /proc/meminfo)"
                                : " (ENOMEM: not enough address space or vm.overcommit_memory forbids it)"));
            }
            AnonymousMemory memory = new AnonymousMemory(address.reinterpret(rounded), page);
            if (preferredNode != ANY_NODE) {
                try {
                    prefer(memory.segment, preferredNode, arena, state);
                } catch (Throwable e) {
                    memory.close();
                    throw e;
                }
            }
            if (lock) {
                int rc = (int) MLOCK2.invokeExact(state, memory.segment, rounded, MLOCK_ONFAULT);
                if (rc != 0) {
                    int errno = (int) ERRNO.get(state, 0L);
                    memory.close();
                    throw new IllegalStateException("mlock of " + rounded + " bytes failed: errno " + errno
                            + (errno == 12 || errno == 1 ? " (the memlock limit is too low: raise it with ulimit -l, "
                                    + "LimitMEMLOCK=infinity in systemd, or run without --mlock)" : ""));
                }
            }
            return memory;
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException("mmap failed", t);
        }
    }

    private static void prefer(MemorySegment range, int node, Arena arena, MemorySegment state) throws Throwable {
        if (SYS_MBIND < 0) {
            throw new IllegalStateException("NUMA placement is not supported on " + System.getProperty("os.arch")
                    + "; leave the node to the kernel");
        }
        int words = node / 64 + 1;
        MemorySegment mask = arena.allocate(ValueLayout.JAVA_LONG, words);
        mask.setAtIndex(ValueLayout.JAVA_LONG, node / 64, 1L << (node % 64));
        // The kernel reads maxnode - 1 bits (a quirk libnuma also passes + 1 for), so the mask's words count whole.
        long rc = (long) SYSCALL6.invokeExact(state, SYS_MBIND, range, range.byteSize(), MPOL_PREFERRED, mask,
                words * 64L + 1, 0L);
        if (rc != 0) {
            int errno = (int) ERRNO.get(state, 0L);
            throw new IllegalStateException("mbind to NUMA node " + node + " failed: errno " + errno
                    + (errno == 22 ? " (EINVAL: the node has no memory, or this process may not use it: see "
                            + "/sys/devices/system/node/has_memory and Mems_allowed_list in /proc/self/status)"
                            : errno == 1
                                    ? " (EPERM: a seccomp filter refuses mbind; container runtimes' default profiles "
                                            + "allow it only with CAP_SYS_NICE)"
                                    : errno == 38 ? " (ENOSYS: a kernel without NUMA)" : ""));
        }
    }

    /** The granularity of {@link #release}: 4 KiB, or 2 MiB for huge pages. */
    public long pageSize() {
        return pageSize;
    }

    public MemorySegment segment() {
        return segment;
    }

    /**
     * Which pages hold written data: marked by whoever writes {@link #segment} (this class cannot see writes), cleared
     * by {@link #release}.
     */
    public WrittenPages writtenPages() {
        return writtenPages;
    }

    /** Gives the pages of a page-aligned range back to the kernel; they read as zeroes afterwards. */
    public void release(long offset, long length) {
        if ((offset | length) % pageSize != 0) {
            throw new IllegalArgumentException("release needs a page-aligned range: " + offset + "+" + length);
        }
        if (length == 0) {
            return;
        }
        writtenPages.clear(offset, length); // first: a read from now on sends zeroes rather than fault a page in
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(CALL_STATE);
            int rc = (int) MADVISE.invokeExact(state, segment.asSlice(offset, length), length, MADV_DONTNEED);
            if (rc != 0) {
                throw new IllegalStateException("madvise(DONTNEED) failed: errno " + (int) ERRNO.get(state, 0L));
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException("madvise failed", t);
        }
    }

    /**
     * Bytes of this mapping backed by RAM of its own right now: pages written and not released. Read from
     * {@code /proc/self/pagemap} (present and exclusively mapped), not {@code mincore}: on most kernels a page that was
     * only read maps the kernel's shared zero page, which mincore counts as resident although it costs nothing.
     * Returns 0 once closed. Reads 8 bytes per page of the mapping, so it is for scrapes, not the data path.
     */
    public synchronized long residentBytes() {
        if (closed) {
            return 0;
        }
        long page = SYSTEM_PAGE_SIZE;
        long first = segment.address() / page;
        long pages = (segment.byteSize() + page - 1) / page;
        ByteBuffer window = PAGEMAP_WINDOW.get();
        long resident = 0;
        try (FileChannel pagemap = FileChannel.open(Path.of("/proc/self/pagemap"), StandardOpenOption.READ)) {
            for (long done = 0; done < pages;) {
                int n = (int) Math.min(pages - done, window.capacity() / 8);
                window.clear().limit(n * 8);
                long at = (first + done) * 8;
                while (window.hasRemaining()) {
                    int r = pagemap.read(window, at + window.position());
                    if (r < 0) {
                        throw new IllegalStateException("/proc/self/pagemap ended early");
                    }
                }
                window.flip();
                for (int i = 0; i < n; i++) {
                    long e = window.getLong(i * 8);
                    if ((e & PM_PRESENT) != 0 && (e & PM_MMAP_EXCLUSIVE) != 0) {
                        resident++;
                    }
                }
                done += n;
            }
        } catch (IOException e) {
            throw new IllegalStateException("cannot read /proc/self/pagemap: " + e.getMessage(), e);
        }
        return resident * page;
    }

    private static final long PM_PRESENT = 1L << 63;
    private static final long PM_MMAP_EXCLUSIVE = 1L << 56;
    /** 64 Ki pagemap entries (256 MiB of 4 KiB pages) per read, reused. */
    private static final ThreadLocal<ByteBuffer> PAGEMAP_WINDOW = ThreadLocal.withInitial(
            () -> ByteBuffer.allocateDirect(512 << 10).order(ByteOrder.nativeOrder()));
    /** The kernel's base page size (pagemap has one entry per base page, 4 KiB on x86-64, 64 KiB on some arm64). */
    static final long SYSTEM_PAGE_SIZE = systemPageSize();

    private static long systemPageSize() {
        try {
            MethodHandle getpagesize = LINKER.downcallHandle(LINKER.defaultLookup().find("getpagesize").orElseThrow(),
                    FunctionDescriptor.of(ValueLayout.JAVA_INT));
            return (int) getpagesize.invokeExact();
        } catch (Throwable t) {
            return PAGE_SIZE;
        }
    }

    public static long roundUp(long length) {
        return (length + PAGE_SIZE - 1) & -PAGE_SIZE;
    }

    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(CALL_STATE);
            int rc = (int) MUNMAP.invokeExact(state, segment, segment.byteSize());
            if (rc != 0) {
                throw new IllegalStateException("munmap failed: errno " + (int) ERRNO.get(state, 0L));
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException("munmap failed", t);
        }
    }
}
