package dev.rbridge.rdma;

import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.Objects;

/** Where and how a provider listens. */
public final class ListenParams {
    private InetSocketAddress address = new InetSocketAddress("127.0.0.1", 7471);
    private Duration helloTimeout = Duration.ofSeconds(10);
    private String tcpCongestion = ConnectParams.TCP_CONGESTION_DEFAULT;
    private ConnectionLimits limits = ConnectionLimits.DEFAULTS;

    public ListenParams address(InetSocketAddress address) {
        this.address = Objects.requireNonNull(address);
        return this;
    }

    /** A client that has not said hello by then is disconnected. */
    public ListenParams helloTimeout(Duration d) {
        this.helloTimeout = Objects.requireNonNull(d);
        return this;
    }

    /** TCP congestion control of accepted tcp-provider sockets; see {@link ConnectParams#tcpCongestion(String)}. */
    public ListenParams tcpCongestion(String algorithm) {
        this.tcpCongestion = ConnectParams.checkCongestion(algorithm);
        return this;
    }

    /** How many connections the listener holds at once; see {@link ConnectionLimits}. */
    public ListenParams limits(ConnectionLimits limits) {
        this.limits = Objects.requireNonNull(limits);
        return this;
    }

    public ConnectionLimits limits() {
        return limits;
    }

    public String tcpCongestion() {
        return tcpCongestion;
    }

    public InetSocketAddress address() {
        return address;
    }

    public Duration helloTimeout() {
        return helloTimeout;
    }
}
