package dev.rbridge.common.splice;

import dev.rbridge.common.ffm.Libc;

import java.io.Closeable;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.ByteBuffer;

/**
 * A kernel pipe that holds data on its way from one socket to another without passing through this process's memory:
 * {@code splice(2)} moves a socket's received pages into it by reference, and out of it into another socket the same
 * way. Both ends are non-blocking, so no call here ever waits on the pipe; a call that would wait on a socket returns
 * 0 instead (the socket descriptors given must be non-blocking, or the caller must know data is there).
 *
 * <p>One owner at a time: a pipe is filled by one thread and then handed, with a happens-before edge, to the one that
 * empties it. {@link #held()} counts what is in it, so the owner knows when it is empty. {@link #close} may come from
 * another thread while a call is under way (a connection that gave up on a read its lane is still receiving): the
 * descriptors are closed once that call has returned, and later calls fail, so a closed number, which the process may
 * reuse at once, is never written to.
 */
public final class Pipe implements Closeable {
    private static final int O_NONBLOCK = 0x800;
    private static final int O_CLOEXEC = 0x80000;
    private static final int F_SETPIPE_SZ = 1031;
    private static final int SPLICE_F_MOVE = 1;
    private static final int SPLICE_F_NONBLOCK = 2;
    private static final int SPLICE_F_MORE = 4;
    private static final long WOULD_BLOCK = -2;

    private static final Libc.Linked<Natives> NATIVES = Libc.Linked.of("pipe2 and splice", Natives::load);

    private final int readFd;
    private final int writeFd;
    private final int capacity;
    private long held;
    private final DescriptorUses uses = new DescriptorUses();

    private Pipe(int readFd, int writeFd, int capacity) {
        this.readFd = readFd;
        this.writeFd = writeFd;
        this.capacity = capacity;
    }

    /** Null when pipes can be made here, else why not (for the one log line that says splicing is off). */
    public static String unavailable() {
        return NATIVES.unlinked();
    }

    /**
     * A pipe that holds at least {@code bytes} written in whole pages. Throws when the kernel will not size one so
     * (above /proc/sys/fs/pipe-max-size, or past the user's pipe-user-pages limits): the caller then copies instead.
     */
    public static Pipe open(int bytes) throws IOException {
        Natives n = natives();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = Libc.callState(arena);
            MemorySegment fds = arena.allocate(ValueLayout.JAVA_INT, 2);
            if (Libc.call(() -> (int) n.pipe2.invokeExact(state, fds, O_NONBLOCK | O_CLOEXEC)) != 0) {
                throw new IOException("pipe2 failed with errno " + Libc.errno(state));
            }
            int r = fds.getAtIndex(ValueLayout.JAVA_INT, 0);
            int w = fds.getAtIndex(ValueLayout.JAVA_INT, 1);
            int size = Libc.call(() -> (int) n.fcntl.invokeExact(state, w, F_SETPIPE_SZ, bytes));
            if (size < bytes) {
                int e = size < 0 ? Libc.errno(state) : 0;
                closeFd(r);
                closeFd(w);
                throw new IOException(size < 0 ? "a pipe of " + bytes + " bytes was refused (errno " + e
                        + "; see /proc/sys/fs/pipe-max-size and pipe-user-pages-soft)"
                        : "the kernel sized a pipe at " + size + " bytes, not " + bytes);
            }
            return new Pipe(r, w, size);
        }
    }

    /** Bytes the pipe holds when filled in whole pages. */
    public int capacity() {
        return capacity;
    }

    /** Bytes in the pipe now. */
    public long held() {
        return held;
    }

    /**
     * Copies {@code src} (a direct buffer) from position to limit into the pipe, advancing its position by what was
     * taken: all of it unless the pipe is full.
     */
    public int write(ByteBuffer src) throws IOException {
        if (!src.isDirect()) {
            throw new IllegalArgumentException("a pipe is written from direct buffers only");
        }
        int want = src.remaining();
        if (want == 0) {
            return 0;
        }
        MemorySegment from = MemorySegment.ofBuffer(src);
        Natives n = natives();
        enter();
        try {
            long w = Libc.invokeUninterrupted(state -> (long) n.write.invokeExact(state, writeFd, from, (long) want));
            if (w == -Libc.EAGAIN) {
                return 0;
            } else if (w < 0) {
                throw new IOException("writing into a pipe failed with errno " + -w);
            }
            src.position(src.position() + (int) w);
            held += w;
            return (int) w;
        } finally {
            exit();
        }
    }

    /**
     * Moves up to {@code max} bytes from the socket {@code fd} into the pipe. Returns what moved; 0 when the pipe is
     * full, or when the socket has nothing to read and is non-blocking; -1 at the end of its stream.
     */
    public int spliceFrom(int fd, int max) throws IOException {
        if (max == 0) {
            return 0;
        }
        long n = splice(fd, writeFd, max, SPLICE_F_MOVE | SPLICE_F_NONBLOCK, "from a socket into a pipe");
        if (n == WOULD_BLOCK) {
            return 0;
        } else if (n == 0) {
            return -1;
        }
        held += n;
        return (int) n;
    }

    /**
     * Moves up to {@code max} bytes from the pipe into the socket {@code fd}, telling the kernel more follows when
     * {@code more}. Returns what moved; 0 when the socket is full (non-blocking) or the pipe is empty.
     */
    public int spliceTo(int fd, int max, boolean more) throws IOException {
        if (held == 0 || max == 0) {
            return 0;
        }
        long n = splice(readFd, fd, (int) Math.min(max, held),
                SPLICE_F_MOVE | SPLICE_F_NONBLOCK | (more ? SPLICE_F_MORE : 0), "from a pipe into a socket");
        if (n == WOULD_BLOCK) {
            return 0;
        }
        held -= n;
        return (int) n;
    }

    /** splice(2), retried on EINTR: bytes moved, 0 at the end of the input, WOULD_BLOCK on EAGAIN. */
    private long splice(int in, int out, int max, int flags, String what) throws IOException {
        Natives n = natives();
        enter();
        try {
            long r = Libc.invokeUninterrupted(state -> (long) n.splice.invokeExact(state, in, MemorySegment.NULL, out,
                    MemorySegment.NULL, (long) max, flags));
            if (r >= 0) {
                return r;
            } else if (r == -Libc.EAGAIN) {
                return WOULD_BLOCK;
            }
            throw new IOException("splice " + what + " failed with errno " + -r);
        } finally {
            exit();
        }
    }

    private void enter() throws IOException {
        if (!uses.enter()) {
            throw new IOException("the pipe is closed");
        }
    }

    private void exit() {
        if (uses.exit()) {
            closeFds(); // closed during this call, which was the last
        }
    }

    /** Closes both ends, at once or when the call under way returns; what the pipe held is dropped. */
    @Override
    public void close() {
        if (uses.close() == DescriptorUses.Closing.RELEASE_NOW) {
            closeFds();
        }
    }

    private void closeFds() {
        closeFd(readFd);
        closeFd(writeFd);
    }

    private static void closeFd(int fd) {
        Natives n = NATIVES.natives();
        if (n != null) {
            Libc.call(() -> (int) n.close.invokeExact(fd));
        }
    }

    private static Natives natives() throws IOException {
        return NATIVES.get();
    }

    private record Natives(MethodHandle pipe2, MethodHandle fcntl, MethodHandle splice, MethodHandle write,
            MethodHandle close) {
        static Natives load() {
            ValueLayout.OfInt i = ValueLayout.JAVA_INT;
            ValueLayout.OfLong l = ValueLayout.JAVA_LONG;
            return new Natives(
                    Libc.downcall("pipe2", FunctionDescriptor.of(i, ValueLayout.ADDRESS, i)),
                    Libc.downcall("fcntl", FunctionDescriptor.of(i, i, i, i), Linker.Option.firstVariadicArg(2)),
                    Libc.downcall("splice", FunctionDescriptor.of(l, i, ValueLayout.ADDRESS, i, ValueLayout.ADDRESS, l,
                            i)),
                    Libc.downcall("write", FunctionDescriptor.of(l, i, ValueLayout.ADDRESS, l)),
                    Libc.downcallWithoutErrno("close", FunctionDescriptor.of(i, i)));
        }
    }
}
