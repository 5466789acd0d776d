package dev.rbridge.rdma;

import dev.rbridge.common.Checks;

import javax.net.ssl.SSLContext;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.Objects;

/** How to reach a memserver. Fluent, JUCX style: {@code new ConnectParams().address(a).token(t)}. */
public final class ConnectParams {
    private InetSocketAddress address;
    private String token = "";
    private String clientName = "rbridge";
    private Duration connectTimeout = Duration.ofSeconds(5);
    private Duration operationTimeout = Duration.ofSeconds(5);
    private int lanes = 1;
    private boolean callerDriven;
    private String tcpCongestion = TCP_CONGESTION_DEFAULT;
    private SSLContext tls;

    /**
     * The TCP congestion control the tcp provider asks for on its sockets unless told otherwise: CUBIC, because BBR
     * (the host default on many cloud images) sizes its window from the minimum round trip, which on a LAN or
     * loopback is microseconds, and so throttles a connection that keeps several large transfers in flight.
     */
    public static final String TCP_CONGESTION_DEFAULT = "cubic";
    /** {@link #tcpCongestion} value that keeps the host's default ({@code net.ipv4.tcp_congestion_control}). */
    public static final String TCP_CONGESTION_SYSTEM = "system";

    /** Most lanes a connection may have. */
    public static final int MAX_LANES = 16;

    public ConnectParams address(InetSocketAddress address) {
        this.address = Objects.requireNonNull(address);
        return this;
    }

    public ConnectParams token(String token) {
        this.token = token == null ? "" : token;
        return this;
    }

    public ConnectParams clientName(String clientName) {
        this.clientName = Objects.requireNonNull(clientName);
        return this;
    }

    public ConnectParams connectTimeout(Duration d) {
        this.connectTimeout = Checks.positive("connect timeout", d);
        return this;
    }

    /** Longest time any operation may stay unanswered before the peer is declared dead. */
    public ConnectParams operationTimeout(Duration d) {
        this.operationTimeout = Checks.positive("operation timeout", d);
        return this;
    }

    /**
     * How many transport connections carry this one (tcp: TCP connections, each served by its own memserver thread;
     * data operations to the first not already busy with half a megabyte, everything else to the first). One is the
     * lowest latency per operation; more let large transfers use more memserver cores. Providers that manage their
     * own paths (ucx, local) ignore it.
     */
    public ConnectParams lanes(int lanes) {
        if (lanes < 1 || lanes > MAX_LANES) {
            throw new IllegalArgumentException("lanes must be between 1 and " + MAX_LANES + ": " + lanes);
        }
        this.lanes = lanes;
        return this;
    }

    public int lanes() {
        return lanes;
    }

    /**
     * Caller-driven completion: a thread that waits on a future the provider returned ({@code get}, {@code join}, or
     * {@code get} with a timeout at least the operation timeout; not futures derived from it with {@code thenApply}
     * and the like) while no other thread is reading the connection reads the replies itself, instead of parking
     * until the provider's I/O thread completes it and wakes it. A synchronous caller then costs what a blocking
     * socket client costs (tcp: two fewer thread hand-offs per operation, which on a shared CPU is most of a 4K round
     * trip); asynchronous callers are served by the I/O thread as always. The price: an interrupt delivered to a
     * thread while it reads for the connection closes the socket (java.nio semantics) and so the connection, so
     * enable it only where waiting threads are not interrupted (the remote-memory tools; not a bridge). The I/O
     * thread also stops reading an idle connection, so a peer that went away is noticed at the next operation rather
     * than at once. Providers without a reading thread to spare (ucx, local) ignore it.
     */
    public ConnectParams callerDriven(boolean callerDriven) {
        this.callerDriven = callerDriven;
        return this;
    }

    public boolean callerDriven() {
        return callerDriven;
    }

    /**
     * TCP congestion control for the tcp provider's sockets (Linux {@code TCP_CONGESTION}): an algorithm the kernel
     * offers ({@code net.ipv4.tcp_available_congestion_control}), or {@link #TCP_CONGESTION_SYSTEM} for the host's
     * default. A host that refuses it keeps its default and the provider logs why once; the connection is not
     * failed for it. Other providers ignore it.
     */
    public ConnectParams tcpCongestion(String algorithm) {
        this.tcpCongestion = checkCongestion(algorithm);
        return this;
    }

    public String tcpCongestion() {
        return tcpCongestion;
    }

    /** {@code algorithm} if it can name a congestion control (as Linux spells them) or is "system"; else throws. */
    public static String checkCongestion(String algorithm) {
        if (algorithm == null || !algorithm.matches("[A-Za-z0-9_]{1,15}")) {
            throw new IllegalArgumentException("a TCP congestion control is a kernel name like cubic, reno or bbr "
                    + "(up to 15 letters, digits or _), or 'system' for the host's default: " + algorithm);
        }
        return algorithm;
    }

    /**
     * TLS on the memserver wire (the tcp provider's whole connection, the ucx provider's control connection; RDMA
     * itself cannot be encrypted): the memserver's certificate must chain to {@code context}'s CA and name the
     * address as given, and the context's own certificate, if any, is presented to a memserver that verifies
     * clients. Null (the default): in clear.
     */
    public ConnectParams tls(SSLContext context) {
        this.tls = context;
        return this;
    }

    /** The TLS context, or null for a connection in clear. */
    public SSLContext tls() {
        return tls;
    }

    public InetSocketAddress address() {
        if (address == null) {
            throw new IllegalStateException("no memserver address given");
        }
        return address;
    }

    public String token() {
        return token;
    }

    public String clientName() {
        return clientName;
    }

    public Duration connectTimeout() {
        return connectTimeout;
    }

    public Duration operationTimeout() {
        return operationTimeout;
    }
}
