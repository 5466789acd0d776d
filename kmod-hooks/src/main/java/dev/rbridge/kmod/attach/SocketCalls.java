package dev.rbridge.kmod.attach;

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
 * The few libc calls attaching needs (sockets the kernel can take over, and netlink), through FFM. Each call returns
 * the C result; a negative one carries {@code -errno}, so callers can say which system call failed and why.
 */
final class SocketCalls {
    static final int AF_UNIX = 1;
    static final int AF_INET = 2;
    static final int AF_INET6 = 10;
    static final int AF_NETLINK = 16;
    static final int SOCK_STREAM = 1;
    static final int SOCK_RAW = 3;
    static final int SOCK_CLOEXEC = 0x80000;
    static final int NETLINK_GENERIC = 16;
    static final int IPPROTO_TCP = 6;
    static final int TCP_NODELAY = 1;
    static final int SOL_NETLINK = 270;
    static final int NETLINK_ADD_MEMBERSHIP = 1;
    static final int SOL_SOCKET = 1;
    static final int SO_RCVTIMEO = 20;
    static final int EINTR = 4;
    static final int EAGAIN = 11;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final StructLayout STATE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final ValueLayout.OfInt INT = ValueLayout.JAVA_INT;
    private static final ValueLayout.OfLong LONG = ValueLayout.JAVA_LONG;
    private static final ValueLayout PTR = ValueLayout.ADDRESS;

    private static final MethodHandle SOCKET = call("socket", FunctionDescriptor.of(INT, INT, INT, INT));
    private static final MethodHandle CONNECT = call("connect", FunctionDescriptor.of(INT, INT, PTR, INT));
    private static final MethodHandle BIND = call("bind", FunctionDescriptor.of(INT, INT, PTR, INT));
    private static final MethodHandle SETSOCKOPT = call("setsockopt",
            FunctionDescriptor.of(INT, INT, INT, INT, PTR, INT));
    private static final MethodHandle SEND = call("send", FunctionDescriptor.of(LONG, INT, PTR, LONG, INT));
    private static final MethodHandle RECV = call("recv", FunctionDescriptor.of(LONG, INT, PTR, LONG, INT));
    private static final MethodHandle CLOSE = call("close", FunctionDescriptor.of(INT, INT));
    private static final MethodHandle STRERROR = LINKER.downcallHandle(
            LINKER.defaultLookup().find("strerror").orElseThrow(), FunctionDescriptor.of(PTR, INT));

    private SocketCalls() {
    }

    private static MethodHandle call(String name, FunctionDescriptor d) {
        return LINKER.downcallHandle(LINKER.defaultLookup().find(name)
                .orElseThrow(() -> new UnsatisfiedLinkError("libc has no " + name)), d, Linker.Option.captureCallState("errno"));
    }

    private static long check(MemorySegment state, long rc) {
        return rc < 0 ? -(int) ERRNO.get(state, 0L) : rc;
    }

    static int socket(int domain, int type, int protocol) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(STATE);
            return (int) check(st, (int) SOCKET.invokeExact(st, domain, type, protocol));
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    static int connect(int fd, MemorySegment address) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(STATE);
            return (int) check(st, (int) CONNECT.invokeExact(st, fd, address, (int) address.byteSize()));
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    static int bind(int fd, MemorySegment address) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(STATE);
            return (int) check(st, (int) BIND.invokeExact(st, fd, address, (int) address.byteSize()));
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    static int setsockopt(int fd, int level, int name, MemorySegment value) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(STATE);
            return (int) check(st, (int) SETSOCKOPT.invokeExact(st, fd, level, name, value, (int) value.byteSize()));
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    static long send(int fd, MemorySegment buf, long len) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(STATE);
            return check(st, (long) SEND.invokeExact(st, fd, buf, len, 0));
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    static long recv(int fd, MemorySegment buf, long len) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(STATE);
            return check(st, (long) RECV.invokeExact(st, fd, buf, len, 0));
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    static void close(int fd) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(STATE);
            int ignored = (int) CLOSE.invokeExact(st, fd); // nothing useful to do if close fails
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** The C library's sentence for an errno value. */
    static String strerror(int errno) {
        try {
            MemorySegment s = (MemorySegment) STRERROR.invokeExact(errno);
            return s.reinterpret(256).getString(0);
        } catch (Throwable t) {
            return "errno " + errno;
        }
    }

    private static RuntimeException rethrow(Throwable t) {
        if (t instanceof RuntimeException r) {
            return r;
        }
        if (t instanceof Error e) {
            throw e;
        }
        return new IllegalStateException(t);
    }
}
