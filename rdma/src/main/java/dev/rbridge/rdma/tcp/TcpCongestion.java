package dev.rbridge.rdma.tcp;

import dev.rbridge.common.ffm.Libc;
import dev.rbridge.common.splice.SocketDescriptor;
import dev.rbridge.rdma.ConnectParams;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
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
    /** The libc calls, or why they cannot be linked. */
    private static final Libc.Linked<Natives> NATIVES = Libc.Linked.of("socket functions", Natives::load);

    private TcpCongestion() {}

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
                log.warn("cannot use TCP congestion control {} ({}); tcp connections keep the host's default",
                        algorithm,
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
        Natives natives = NATIVES.get();
        int fd = SocketDescriptor.find(channel);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment value = arena.allocateFrom(algorithm);
            long rc = Libc.invoke(state -> (int) natives.setsockopt.invokeExact(state, fd, IPPROTO_TCP, TCP_CONGESTION,
                    value, nameLength));
            if (rc != 0) {
                long errno = -rc;
                throw new IOException(switch ((int) errno) {
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
        Natives natives = NATIVES.get();
        int fd = SocketDescriptor.find(channel);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment value = arena.allocate(NAME_MAX);
            MemorySegment length = arena.allocateFrom(ValueLayout.JAVA_INT, NAME_MAX);
            long rc = Libc.invoke(state -> (int) natives.getsockopt.invokeExact(state, fd, IPPROTO_TCP, TCP_CONGESTION,
                    value, length));
            if (rc != 0) {
                throw new IOException("getsockopt(TCP_CONGESTION) failed with errno " + -rc);
            }
            return value.getString(0);
        }
    }

    private record Natives(MethodHandle setsockopt, MethodHandle getsockopt) {
        static Natives load() {
            FunctionDescriptor sockopt = FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                    ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT);
            FunctionDescriptor getsockopt = FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                    ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS);
            return new Natives(Libc.downcall("setsockopt", sockopt), Libc.downcall("getsockopt", getsockopt));
        }
    }
}
