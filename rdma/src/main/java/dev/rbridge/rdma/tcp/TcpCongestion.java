package dev.rbridge.rdma.tcp;

import dev.rbridge.common.splice.SocketDescriptor;
import dev.rbridge.rdma.ConnectParams;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

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
import java.nio.channels.SocketChannel;

/**
 * Chooses the TCP congestion control of a connected socket ({@code setsockopt(TCP_CONGESTION)}, which the JDK does not
 * offer), so that a memory transport is not run under whatever the host picked for WAN traffic.
 *
 * <p>Why it matters: BBR, the default on many cloud images (this project's CI VMs among them), sizes a flow's window
 * from its bandwidth times its minimum round trip. On a path of a few microseconds that window is ~1.5 MB, so a
 * connection with several 1 MiB writes queued is paced from timers and acknowledgements instead of being sent at once,
 * at a fraction of what CUBIC moves on the same path (bench/README.md has the runs). CUBIC's window grows with what
 * the path delivers.
 *
 * <p>The JDK hides a channel's file descriptor: {@link SocketDescriptor#find} finds it by its addresses.
 */
public final class TcpCongestion {
    private static final Logger log = LoggerFactory.getLogger(TcpCongestion.class);
    private static final int IPPROTO_TCP = 6;
    private static final int TCP_CONGESTION = 13;
    private static final int NAME_MAX = 16; // TCP_CA_NAME_MAX, terminating NUL included

    /** Algorithms already refused here: each is warned about once, then logged at debug. */
    private static final java.util.Set<String> REFUSED = java.util.concurrent.ConcurrentHashMap.newKeySet();
    /** The libc calls, or null when they cannot be linked; then {@link #UNLINKED} says why. */
    private static final Natives NATIVES;
    private static final String UNLINKED;

    static {
        Natives n = null;
        String why = null;
        try {
            n = Natives.load();
        } catch (RuntimeException | LinkageError e) {
            why = "cannot call libc's socket functions: " + e + " (they need native access, "
                    + "--enable-native-access=ALL-UNNAMED, and a libc that has them)";
        }
        NATIVES = n;
        UNLINKED = why;
    }

    private TcpCongestion() {
    }

    /**
     * Sets {@code algorithm} on {@code channel} (connected) unless it is {@link ConnectParams#TCP_CONGESTION_SYSTEM}.
     * Never fails the connection: a host that refuses (algorithm not available or not allowed, no native access, not
     * Linux) keeps its default, and says why once in the log. Also used for the bridge's NBD sockets.
     */
    public static void apply(SocketChannel channel, String algorithm) {
        if (algorithm.equals(ConnectParams.TCP_CONGESTION_SYSTEM)) {
            return;
        }
        try {
            set(channel, algorithm);
        } catch (IOException | RuntimeException e) {
            if (REFUSED.add(algorithm)) {
                log.warn("cannot use TCP congestion control {} ({}); tcp connections keep the host's default", algorithm,
                        e.getMessage());
            } else {
                log.debug("cannot use TCP congestion control {}: {}", algorithm, e.getMessage());
            }
        }
    }

    /** Sets {@code algorithm} on {@code channel}; throws with the reason when the host refuses. */
    static void set(SocketChannel channel, String algorithm) throws IOException {
        // ASCII and shorter than NAME_MAX once checked; "system" is no kernel name, so it is refused there too
        int nameLength = ConnectParams.checkCongestion(algorithm).length();
        Natives natives = natives();
        int fd = SocketDescriptor.find(channel);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Natives.CALL_STATE);
            MemorySegment value = arena.allocateFrom(algorithm);
            int rc = call(() -> (int) natives.setsockopt.invokeExact(state, fd, IPPROTO_TCP, TCP_CONGESTION, value,
                    nameLength));
            if (rc != 0) {
                int errno = (int) Natives.ERRNO.get(state, 0L);
                throw new IOException(switch (errno) {
                    case 2 -> "the kernel has no algorithm '" + algorithm + "' (see "
                            + "net.ipv4.tcp_available_congestion_control)";
                    case 1 -> "'" + algorithm + "' is not in net.ipv4.tcp_allowed_congestion_control";
                    default -> "setsockopt(TCP_CONGESTION) failed with errno " + errno;
                });
            }
        }
    }

    /** The algorithm {@code channel} runs under, as the kernel reports it. */
    static String get(SocketChannel channel) throws IOException {
        Natives natives = natives();
        int fd = SocketDescriptor.find(channel);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Natives.CALL_STATE);
            MemorySegment value = arena.allocate(NAME_MAX);
            MemorySegment length = arena.allocateFrom(ValueLayout.JAVA_INT, NAME_MAX);
            int rc = call(() -> (int) natives.getsockopt.invokeExact(state, fd, IPPROTO_TCP, TCP_CONGESTION, value,
                    length));
            if (rc != 0) {
                throw new IOException("getsockopt(TCP_CONGESTION) failed with errno " + Natives.ERRNO.get(state, 0L));
            }
            return value.getString(0);
        }
    }

    /** A downcall returning int; {@link MethodHandle#invokeExact} declares Throwable, which libc calls never throw. */
    @FunctionalInterface
    private interface LibcCall {
        int run() throws Throwable;
    }

    private static int call(LibcCall c) {
        try {
            return c.run();
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }

    private static Natives natives() throws IOException {
        if (NATIVES == null) {
            throw new IOException(UNLINKED);
        }
        return NATIVES;
    }

    private record Natives(MethodHandle setsockopt, MethodHandle getsockopt) {
        static final StructLayout CALL_STATE = Linker.Option.captureStateLayout();
        static final VarHandle ERRNO = CALL_STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));

        static Natives load() {
            Linker linker = Linker.nativeLinker();
            FunctionDescriptor sockopt = FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                    ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT);
            FunctionDescriptor getsockopt = FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                    ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS);
            Linker.Option errno = Linker.Option.captureCallState("errno");
            return new Natives(
                    linker.downcallHandle(find(linker, "setsockopt"), sockopt, errno),
                    linker.downcallHandle(find(linker, "getsockopt"), getsockopt, errno));
        }

        private static MemorySegment find(Linker linker, String symbol) {
            return linker.defaultLookup().find(symbol).orElseThrow(() -> new UnsatisfiedLinkError("no " + symbol));
        }
    }
}
