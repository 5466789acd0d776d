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

/**
 * A private anonymous mapping (Linux {@code mmap}): address space is reserved up front, the kernel backs a page with
 * RAM only when it is first written, and {@link #release} hands pages back ({@code MADV_DONTNEED}), after which they
 * read as zeroes. This is what makes an export of any size cost only the memory actually written.
 */
public final class AnonymousMemory implements AutoCloseable {
    public static final int PAGE_SIZE = 4096;

    private static final int PROT_READ = 1;
    private static final int PROT_WRITE = 2;
    private static final int MAP_PRIVATE = 0x02;
    private static final int MAP_ANONYMOUS = 0x20;
    private static final int MAP_NORESERVE = 0x4000;
    private static final int MADV_DONTNEED = 4;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final StructLayout CALL_STATE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CALL_STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final MethodHandle MMAP = downcall("mmap", FunctionDescriptor.of(ValueLayout.ADDRESS,
            ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
            ValueLayout.JAVA_LONG));
    private static final MethodHandle MUNMAP = downcall("munmap", FunctionDescriptor.of(ValueLayout.JAVA_INT,
            ValueLayout.ADDRESS, ValueLayout.JAVA_LONG));
    private static final MethodHandle MADVISE = downcall("madvise", FunctionDescriptor.of(ValueLayout.JAVA_INT,
            ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT));

    private final MemorySegment segment;
    private volatile boolean closed;

    private AnonymousMemory(MemorySegment segment) {
        this.segment = segment;
    }

    private static MethodHandle downcall(String name, FunctionDescriptor descriptor) {
        return LINKER.downcallHandle(LINKER.defaultLookup().find(name)
                        .orElseThrow(() -> new UnsatisfiedLinkError("libc has no " + name)),
                descriptor, Linker.Option.captureCallState("errno"));
    }

    /** Reserves {@code length} bytes (rounded up to whole pages) of zero-filled, lazily backed memory. */
    public static AnonymousMemory map(long length) {
        long rounded = roundUp(length);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(CALL_STATE);
            MemorySegment address = (MemorySegment) MMAP.invokeExact(state, MemorySegment.NULL, rounded,
                    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0L);
            if (address.address() == -1L) {
                int errno = (int) ERRNO.get(state, 0L);
                throw new IllegalStateException("mmap of " + rounded + " bytes failed: errno " + errno
                        + (errno == 12 ? " (ENOMEM: not enough address space or vm.overcommit_memory forbids it)" : ""));
            }
            return new AnonymousMemory(address.reinterpret(rounded));
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException("mmap failed", t);
        }
    }

    public MemorySegment segment() {
        return segment;
    }

    /** Gives the pages of a page-aligned range back to the kernel; they read as zeroes afterwards. */
    public void release(long offset, long length) {
        if ((offset | length) % PAGE_SIZE != 0) {
            throw new IllegalArgumentException("release needs a page-aligned range: " + offset + "+" + length);
        }
        if (length == 0) {
            return;
        }
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
