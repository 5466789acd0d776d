package dev.rbridge.kmod.attach;

import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.Inet4Address;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

/**
 * A stream socket made with libc rather than {@code java.nio}, because its file descriptor is handed to the kernel's
 * nbd driver (which then owns the connection); Java's channels never expose theirs. Blocking I/O, used only for the
 * NBD handshake before the hand-over.
 */
final class NativeSocket implements AutoCloseable {
    private final int fd;
    private final String peer;
    private boolean handedOver;

    private NativeSocket(int fd, String peer) {
        this.fd = fd;
        this.peer = peer;
    }

    static NativeSocket connect(InetSocketAddress address) throws IOException {
        InetAddress ip = address.getAddress();
        if (ip == null) {
            throw new IOException("cannot resolve " + address.getHostString());
        }
        String peer = address.getHostString() + ":" + address.getPort();
        try (Arena a = Arena.ofConfined()) {
            MemorySegment sa;
            int family;
            if (ip instanceof Inet4Address) {
                family = SocketCalls.AF_INET;
                sa = a.allocate(16);
                sa.set(ValueLayout.JAVA_SHORT, 0, (short) SocketCalls.AF_INET);
                sa.set(ValueLayout.JAVA_BYTE, 2, (byte) (address.getPort() >> 8)); // network byte order
                sa.set(ValueLayout.JAVA_BYTE, 3, (byte) address.getPort());
                MemorySegment.copy(MemorySegment.ofArray(ip.getAddress()), 0, sa, 4, 4);
            } else if (ip instanceof Inet6Address six) {
                family = SocketCalls.AF_INET6;
                sa = a.allocate(28);
                sa.set(ValueLayout.JAVA_SHORT, 0, (short) SocketCalls.AF_INET6);
                sa.set(ValueLayout.JAVA_BYTE, 2, (byte) (address.getPort() >> 8));
                sa.set(ValueLayout.JAVA_BYTE, 3, (byte) address.getPort());
                MemorySegment.copy(MemorySegment.ofArray(ip.getAddress()), 0, sa, 8, 16);
                sa.set(ValueLayout.JAVA_INT, 24, six.getScopeId());
            } else {
                throw new IOException("unsupported address " + ip);
            }
            int fd = SocketCalls.socket(family, SocketCalls.SOCK_STREAM | SocketCalls.SOCK_CLOEXEC, 0);
            if (fd < 0) {
                throw new IOException("socket(): " + SocketCalls.strerror(-fd));
            }
            int rc = SocketCalls.connect(fd, sa);
            if (rc < 0) {
                SocketCalls.close(fd);
                throw new IOException("cannot connect to " + peer + ": " + SocketCalls.strerror(-rc));
            }
            MemorySegment one = a.allocateFrom(ValueLayout.JAVA_INT, 1);
            SocketCalls.setsockopt(fd, SocketCalls.IPPROTO_TCP, SocketCalls.TCP_NODELAY, one); // requests are small; latency matters
            return new NativeSocket(fd, peer);
        }
    }

    static NativeSocket connect(Path unix) throws IOException {
        byte[] path = unix.toString().getBytes(StandardCharsets.UTF_8);
        if (path.length >= 108) {
            throw new IOException("Unix socket path too long (108 bytes at most): " + unix);
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment sa = a.allocate(110);
            sa.set(ValueLayout.JAVA_SHORT, 0, (short) SocketCalls.AF_UNIX);
            MemorySegment.copy(MemorySegment.ofArray(path), 0, sa, 2, path.length);
            int fd = SocketCalls.socket(SocketCalls.AF_UNIX, SocketCalls.SOCK_STREAM | SocketCalls.SOCK_CLOEXEC, 0);
            if (fd < 0) {
                throw new IOException("socket(): " + SocketCalls.strerror(-fd));
            }
            int rc = SocketCalls.connect(fd, sa);
            if (rc < 0) {
                SocketCalls.close(fd);
                throw new IOException("cannot connect to " + unix + ": " + SocketCalls.strerror(-rc));
            }
            return new NativeSocket(fd, unix.toString());
        }
    }

    /**
     * Bounds every blocking receive (0: none). Set it for the handshake, and back to 0 before the hand-over: the
     * kernel's receive thread would otherwise take the timeout for a dead connection.
     */
    void receiveTimeout(long millis) throws IOException {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment tv = a.allocate(16);
            tv.set(ValueLayout.JAVA_LONG, 0, millis / 1000);
            tv.set(ValueLayout.JAVA_LONG, 8, (millis % 1000) * 1000);
            int rc = SocketCalls.setsockopt(fd, SocketCalls.SOL_SOCKET, SocketCalls.SO_RCVTIMEO, tv);
            if (rc < 0) {
                throw new IOException("setsockopt(SO_RCVTIMEO): " + SocketCalls.strerror(-rc));
            }
        }
    }

    int fd() {
        return fd;
    }

    String peer() {
        return peer;
    }

    void readFully(ByteBuffer dst) throws IOException {
        if (!dst.hasRemaining()) {
            return;
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment buf = a.allocate(dst.remaining());
            long got = 0;
            long want = dst.remaining();
            while (got < want) {
                long n = SocketCalls.recv(fd, buf.asSlice(got), want - got);
                if (n == -SocketCalls.EINTR) {
                    continue;
                }
                if (n == -SocketCalls.EAGAIN) {
                    throw new IOException(peer + " did not answer the handshake in time");
                }
                if (n < 0) {
                    throw new IOException("reading from " + peer + ": " + SocketCalls.strerror((int) -n));
                }
                if (n == 0) {
                    throw new EOFException(peer + " closed the connection during the handshake");
                }
                got += n;
            }
            dst.put(buf.asByteBuffer());
        }
    }

    void writeAll(ByteBuffer src) throws IOException {
        if (!src.hasRemaining()) {
            return;
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment buf = a.allocate(src.remaining());
            buf.asByteBuffer().put(src);
            long sent = 0;
            while (sent < buf.byteSize()) {
                long n = SocketCalls.send(fd, buf.asSlice(sent), buf.byteSize() - sent);
                if (n == -SocketCalls.EINTR) {
                    continue;
                }
                if (n < 0) {
                    throw new IOException("writing to " + peer + ": " + SocketCalls.strerror((int) -n));
                }
                sent += n;
            }
        }
    }

    /**
     * The kernel holds its own reference once it has the descriptor, so ours is closed either way; after a hand-over
     * closing ours leaves the connection to the kernel.
     */
    void handedOver() {
        handedOver = true;
    }

    boolean isHandedOver() {
        return handedOver;
    }

    @Override
    public void close() {
        SocketCalls.close(fd);
    }
}
