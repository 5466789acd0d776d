package dev.rbridge.cli;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.charset.StandardCharsets;

/**
 * systemd's readiness protocol ({@code Type=notify}) without libsystemd: a datagram to {@code $NOTIFY_SOCKET}, an
 * AF_UNIX path or, starting with {@code @}, an abstract name. The JDK has no Unix datagram sockets, so FFM. Without
 * the variable (not under systemd) every call does nothing; a failure is logged once and never stops the service.
 */
final class SystemdNotify {
    private static final Logger log = LoggerFactory.getLogger(SystemdNotify.class);
    private static final int AF_UNIX = 1;
    private static final int SOCK_DGRAM = 2;
    private static final int SOCK_CLOEXEC = 0x80000;
    /** sizeof(struct sockaddr_un): a 2-byte family and 108 bytes of path. */
    private static final int SOCKADDR_UN = 110;
    private static volatile boolean failed;

    private SystemdNotify() {}

    /** Once STOPPING=1 went out, a late READY=1 would tell systemd a stopping service is up again. */
    private static final java.util.concurrent.atomic.AtomicBoolean STOPPING =
            new java.util.concurrent.atomic.AtomicBoolean();

    /**
     * The service is up: it listens and serves (READY=1), with a status line for systemctl status. Not sent once
     * {@link #stopping} was (a stop that came while the service was still starting).
     */
    static synchronized void ready(String status) {
        if (!STOPPING.get()) {
            send("READY=1\nSTATUS=" + status.replace('\n', ' '));
        }
    }

    /** The service is stopping (STOPPING=1): systemd shows it deactivating while the drain runs. */
    static synchronized void stopping() {
        if (STOPPING.compareAndSet(false, true)) {
            send("STOPPING=1");
        }
    }

    private static void send(String message) {
        String socket = System.getenv("NOTIFY_SOCKET");
        if (socket == null || socket.isEmpty() || failed) {
            return;
        }
        byte[] path = socket.getBytes(StandardCharsets.UTF_8);
        if (path.length >= SOCKADDR_UN - 2) {
            warn("NOTIFY_SOCKET is longer than a Unix socket path may be");
            return;
        }
        try (Arena a = Arena.ofConfined()) {
            Linker linker = Linker.nativeLinker();
            MethodHandle socketCall = linker.downcallHandle(linker.defaultLookup().find("socket").orElseThrow(),
                    FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                            ValueLayout.JAVA_INT));
            MethodHandle sendto = linker.downcallHandle(linker.defaultLookup().find("sendto").orElseThrow(),
                    FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT, ValueLayout.ADDRESS,
                            ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT));
            MethodHandle close = linker.downcallHandle(linker.defaultLookup().find("close").orElseThrow(),
                    FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
            MemorySegment address = a.allocate(SOCKADDR_UN);
            address.set(ValueLayout.JAVA_SHORT, 0, (short) AF_UNIX);
            MemorySegment.copy(path, 0, address, ValueLayout.JAVA_BYTE, 2, path.length);
            if (path[0] == '@') {
                address.set(ValueLayout.JAVA_BYTE, 2, (byte) 0); // an abstract name: a leading NUL, no terminator
            }
            int length = path[0] == '@' ? 2 + path.length : 2 + path.length + 1;
            byte[] bytes = message.getBytes(StandardCharsets.UTF_8);
            MemorySegment data = a.allocate(bytes.length);
            MemorySegment.copy(bytes, 0, data, ValueLayout.JAVA_BYTE, 0, bytes.length);
            int fd = (int) socketCall.invokeExact(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
            if (fd < 0) {
                warn("socket(AF_UNIX, SOCK_DGRAM) failed");
                return;
            }
            try {
                long sent = (long) sendto.invokeExact(fd, data, (long) bytes.length, 0, address, length);
                if (sent < 0) {
                    warn("sendto " + socket + " failed");
                }
            } finally {
                int ignored = (int) close.invokeExact(fd);
            }
        } catch (Throwable t) {
            warn(t.toString());
        }
    }

    private static void warn(String why) {
        if (!failed) {
            failed = true;
            log.warn("cannot notify systemd ({}); the unit sees readiness only by its timeout", why);
        }
    }
}
