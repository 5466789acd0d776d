package dev.rbridge.kmod.attach;

import dev.rbridge.common.ffm.Libc;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

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
    static final int EINTR = Libc.EINTR;
    static final int EAGAIN = Libc.EAGAIN;

    private static final ValueLayout.OfInt INT = ValueLayout.JAVA_INT;
    private static final ValueLayout.OfLong LONG = ValueLayout.JAVA_LONG;
    private static final ValueLayout PTR = ValueLayout.ADDRESS;

    private static final MethodHandle SOCKET = Libc.downcall("socket", FunctionDescriptor.of(INT, INT, INT, INT));
    private static final MethodHandle CONNECT = Libc.downcall("connect", FunctionDescriptor.of(INT, INT, PTR, INT));
    private static final MethodHandle BIND = Libc.downcall("bind", FunctionDescriptor.of(INT, INT, PTR, INT));
    private static final MethodHandle SETSOCKOPT = Libc.downcall("setsockopt",
            FunctionDescriptor.of(INT, INT, INT, INT, PTR, INT));
    private static final MethodHandle SEND = Libc.downcall("send", FunctionDescriptor.of(LONG, INT, PTR, LONG, INT));
    private static final MethodHandle RECV = Libc.downcall("recv", FunctionDescriptor.of(LONG, INT, PTR, LONG, INT));
    private static final MethodHandle CLOSE = Libc.downcall("close", FunctionDescriptor.of(INT, INT));

    private SocketCalls() {}

    static int socket(int domain, int type, int protocol) {
        return (int) Libc.invoke(st -> (int) SOCKET.invokeExact(st, domain, type, protocol));
    }

    static int connect(int fd, MemorySegment address) {
        return (int) Libc.invoke(st -> (int) CONNECT.invokeExact(st, fd, address, (int) address.byteSize()));
    }

    static int bind(int fd, MemorySegment address) {
        return (int) Libc.invoke(st -> (int) BIND.invokeExact(st, fd, address, (int) address.byteSize()));
    }

    static int setsockopt(int fd, int level, int name, MemorySegment value) {
        return (int) Libc.invoke(st -> (int) SETSOCKOPT.invokeExact(st, fd, level, name, value,
                (int) value.byteSize()));
    }

    static long send(int fd, MemorySegment buf, long len) {
        return Libc.invoke(st -> (long) SEND.invokeExact(st, fd, buf, len, 0));
    }

    static long recv(int fd, MemorySegment buf, long len) {
        return Libc.invoke(st -> (long) RECV.invokeExact(st, fd, buf, len, 0));
    }

    static void close(int fd) {
        long ignored = Libc.invoke(st -> (int) CLOSE.invokeExact(st, fd)); // nothing useful to do if close fails
    }

    /** The C library's sentence for an errno value. */
    static String strerror(int errno) {
        return Libc.strerror(errno);
    }
}
