package dev.rbridge.rdma;

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
        this.connectTimeout = positive(d);
        return this;
    }

    /** Longest time any operation may stay unanswered before the peer is declared dead. */
    public ConnectParams operationTimeout(Duration d) {
        this.operationTimeout = positive(d);
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

    private static Duration positive(Duration d) {
        if (d == null || d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException("timeouts must be positive");
        }
        return d;
    }
}
