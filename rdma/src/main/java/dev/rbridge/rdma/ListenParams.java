package dev.rbridge.rdma;

import javax.net.ssl.SSLContext;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.Objects;

/** Where and how a provider listens. */
public final class ListenParams {
    private InetSocketAddress address = new InetSocketAddress("127.0.0.1", 7471);
    private Duration helloTimeout = Duration.ofSeconds(10);
    private String tcpCongestion = ConnectParams.TCP_CONGESTION_DEFAULT;
    private ConnectionLimits limits = ConnectionLimits.DEFAULTS;
    private SSLContext tls;
    private boolean tlsVerifyPeer;

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

    /**
     * TLS on every connection (the tcp provider's whole connection, the ucx provider's control connection): clients
     * that do not speak it are refused ({@code tls_required}), handshakes that fail counted as {@code tls_handshake}.
     * With {@code verifyPeer} each client must present a certificate that chains to {@code context}'s CA. Null: in
     * clear.
     */
    public ListenParams tls(SSLContext context, boolean verifyPeer) {
        if (context == null && verifyPeer) {
            throw new IllegalArgumentException("verifying clients' certificates needs TLS");
        }
        this.tls = context;
        this.tlsVerifyPeer = verifyPeer;
        return this;
    }

    /** The TLS context, or null for connections in clear. */
    public SSLContext tls() {
        return tls;
    }

    /** Whether clients must present a certificate from the CA. */
    public boolean tlsVerifyPeer() {
        return tlsVerifyPeer;
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
