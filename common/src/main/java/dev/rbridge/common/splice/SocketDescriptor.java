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
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.stream.Stream;

/**
 * A descriptor of our own for a connected channel's socket, for the system calls the JDK does not offer (splice,
 * setsockopt of options it does not know).
 *
 * <p>The JDK hides a channel's descriptor, so it is found by its addresses: the process's descriptors are asked for
 * their local and peer address until one matches the channel's; a connected channel's address pair is unique while it
 * is open. That descriptor is then duplicated: the JDK may close its own at any time and the number be reused for
 * another socket, and a splice into a reused number would hand one client's data to another. The duplicate refers to
 * this socket until {@link #close} however the channel is closed, so closing the channel alone no longer ends the
 * connection: the owner closes this with it. Closing shuts the socket down at once, which wakes a thread blocked on
 * it; the duplicate itself is closed once the last thread using it ({@link #enter} .. {@link #exit}) has left, so a
 * number that is about to be closed is never used.
 */
public final class SocketDescriptor implements Closeable {
    private static final int F_DUPFD_CLOEXEC = 1030;
    private static final int AF_INET = 2;
    private static final int AF_INET6 = 10;
    private static final Libc.Linked<Natives> NATIVES = Libc.Linked.of("socket functions", Natives::load);

    private static final int SHUT_RDWR = 2;
    private static final short POLLIN = 1;

    private final int fd;
    /** Threads inside {@link #enter} .. {@link #exit}. */
    private final DescriptorUses uses = new DescriptorUses();

    private SocketDescriptor(int fd) {
        this.fd = fd;
    }

    /** A duplicate of {@code channel}'s descriptor (connected), owned by the caller. */
    public static SocketDescriptor of(SocketChannel channel) throws IOException {
        Natives n = natives();
        int found = find(channel);
        int dup = (int) Libc.invoke(state -> (int) n.fcntl.invokeExact(state, found, F_DUPFD_CLOEXEC, 0));
        if (dup < 0) {
            throw new IOException("duplicating a socket's descriptor failed with errno " + -dup);
        }
        boolean same;
        try {
            same = sameAddresses(n, dup, channel);
        } catch (IOException | RuntimeException e) {
            same = false; // the channel closed meanwhile
        }
        if (!same) {
            // The number was another socket by the time we duplicated it: close our duplicate, and never shut that
            // socket down, as close() would.
            Libc.call(() -> (int) n.close.invokeExact(dup));
            throw new IOException("the socket closed while its descriptor was looked up");
        }
        return new SocketDescriptor(dup);
    }

    /**
     * The JDK's own descriptor of {@code channel} (connected), to be used at once by a thread that keeps the channel
     * open meanwhile (setting an option while setting the connection up).
     */
    public static int find(SocketChannel channel) throws IOException {
        Natives n = natives();
        int[] descriptors;
        try (Stream<Path> fds = Files.list(Path.of("/proc/self/fd"))) {
            descriptors = fds.mapToInt(p -> Integer.parseInt(p.getFileName().toString())).toArray();
        }
        for (int fd : descriptors) {
            if (sameAddresses(n, fd, channel)) {
                return fd;
            }
        }
        throw new IOException("no descriptor of this process has the address pair " + channel.getLocalAddress()
                + " - " + channel.getRemoteAddress());
    }

    /** Starts a use of {@link #fd}: false when closed (then do not use it), else call {@link #exit} after. */
    public boolean enter() {
        return uses.enter();
    }

    /** Ends a use begun by {@link #enter}. */
    public void exit() {
        if (uses.exit()) {
            closeDuplicate(); // closed meanwhile, and this was the last use
        }
    }

    /** The descriptor, for use between {@link #enter} and {@link #exit}. */
    public int fd() {
        if (uses.released()) {
            throw new IllegalStateException("closed");
        }
        return fd;
    }

    /**
     * Waits until the socket has input (or an end, an error, a shutdown) or {@code timeoutMillis} pass; true when it
     * is readable. Between {@link #enter} and {@link #exit}.
     */
    public boolean awaitReadable(int timeoutMillis) throws IOException {
        Natives n = natives();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment poll = arena.allocate(8); // struct pollfd { int fd; short events; short revents; }
            poll.set(ValueLayout.JAVA_INT, 0, fd);
            poll.set(ValueLayout.JAVA_SHORT, 4, POLLIN);
            long r = Libc.invoke(state -> (int) n.poll.invokeExact(state, poll, 1L, timeoutMillis));
            if (r < 0 && r != -Libc.EINTR) {
                throw new IOException("poll failed with errno " + -r);
            }
            return r > 0;
        }
    }

    /** Shuts the socket down (both ways) and closes the duplicate once nobody uses it. */
    @Override
    public void close() {
        DescriptorUses.Closing closing = uses.close();
        if (closing == DescriptorUses.Closing.ALREADY_CLOSED) {
            return;
        }
        Natives n = NATIVES.natives();
        Libc.call(() -> (int) n.shutdown.invokeExact(fd, SHUT_RDWR));
        if (closing == DescriptorUses.Closing.RELEASE_NOW) {
            closeDuplicate();
        }
    }

    private void closeDuplicate() {
        Natives n = NATIVES.natives();
        Libc.call(() -> (int) n.close.invokeExact(fd));
    }

    private static boolean sameAddresses(Natives n, int fd, SocketChannel channel) throws IOException {
        InetSocketAddress local = (InetSocketAddress) channel.getLocalAddress();
        InetSocketAddress remote = (InetSocketAddress) channel.getRemoteAddress();
        if (local == null || remote == null) {
            throw new IOException("the socket is not connected");
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment address = arena.allocate(128);
            MemorySegment length = arena.allocate(ValueLayout.JAVA_INT);
            return remote.equals(address(n.getpeername, fd, address, length))
                    && local.equals(address(n.getsockname, fd, address, length));
        }
    }

    /**
     * The address {@code name} (getsockname or getpeername) reports for {@code fd}, or null when the call fails (not
     * a socket, not connected, closed meanwhile) or the address is not an IP one.
     */
    private static InetSocketAddress address(MethodHandle name, int fd, MemorySegment buffer, MemorySegment length) {
        length.set(ValueLayout.JAVA_INT, 0, (int) buffer.byteSize());
        if (Libc.call(() -> (int) name.invokeExact(fd, buffer, length)) != 0) {
            return null;
        }
        int family = Short.toUnsignedInt(buffer.get(ValueLayout.JAVA_SHORT, 0));
        int port = Short.toUnsignedInt(buffer.get(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.BIG_ENDIAN), 2));
        byte[] ip = switch (family) {
            case AF_INET -> buffer.asSlice(4, 4).toArray(ValueLayout.JAVA_BYTE);
            case AF_INET6 -> buffer.asSlice(8, 16).toArray(ValueLayout.JAVA_BYTE);
            default -> null;
        };
        try {
            // An IPv4-mapped IPv6 address comes back as the IPv4 address, as the JDK reports a dual-stack socket's.
            return ip == null ? null : new InetSocketAddress(InetAddress.getByAddress(ip), port);
        } catch (UnknownHostException e) {
            return null; // only for an address of another length, which the switch rules out
        }
    }

    private static Natives natives() throws IOException {
        return NATIVES.get();
    }

    private record Natives(MethodHandle getsockname, MethodHandle getpeername, MethodHandle fcntl,
            MethodHandle close, MethodHandle shutdown, MethodHandle poll) {
        static Natives load() {
            ValueLayout.OfInt i = ValueLayout.JAVA_INT;
            FunctionDescriptor name = FunctionDescriptor.of(i, i, ValueLayout.ADDRESS, ValueLayout.ADDRESS);
            return new Natives(
                    Libc.downcallWithoutErrno("getsockname", name),
                    Libc.downcallWithoutErrno("getpeername", name),
                    Libc.downcall("fcntl", FunctionDescriptor.of(i, i, i, i), Linker.Option.firstVariadicArg(2)),
                    Libc.downcallWithoutErrno("close", FunctionDescriptor.of(i, i)),
                    Libc.downcallWithoutErrno("shutdown", FunctionDescriptor.of(i, i, i)),
                    Libc.downcall("poll", FunctionDescriptor.of(i, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, i)));
        }
    }
}
