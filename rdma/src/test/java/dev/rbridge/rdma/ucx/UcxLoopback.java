package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RemoteMemoryException;

import java.net.InetSocketAddress;
import java.time.Duration;

/**
 * A ucx memserver side in this JVM ({@link UcxListener} over {@link ArenaRegionServiceForTests}, on loopback; UCX_TLS=tcp
 * as every test here) and connections to it with a 60 s operation timeout: the setup the ucx tests share.
 */
final class UcxLoopback implements AutoCloseable {
    private final String token;
    final UcxListener listener;
    /** The listener's sessions and regions: a test cuts a session off as an operator's disconnect would. */
    final ArenaRegionServiceForTests service;

    UcxLoopback(String token) throws Exception {
        this(token, new ListenParams().address(new InetSocketAddress("127.0.0.1", 0)));
    }

    /** With the listener's settings given ({@code params} must name the address, a loopback one). */
    UcxLoopback(String token, ListenParams params) throws Exception {
        UcxPresent.assume();
        this.token = token;
        this.service = new ArenaRegionServiceForTests(token);
        this.listener = UcxListener.start(params, service);
    }

    /** A new client connection, named {@code name}. */
    UcxConnection connect(String name) throws RemoteMemoryException {
        return (UcxConnection) new UcxProvider().connect(new ConnectParams().address(listener.address()).token(token)
                .clientName(name).operationTimeout(Duration.ofSeconds(60)));
    }

    @Override
    public void close() {
        listener.close();
    }
}
