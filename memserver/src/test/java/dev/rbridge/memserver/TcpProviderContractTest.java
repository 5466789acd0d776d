package dev.rbridge.memserver;

import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.tcp.TcpProvider;

/** The provider contract over the pure-Java tcp provider. */
class TcpProviderContractTest extends ProviderContractTest {
    @Override
    RemoteMemoryProvider provider() {
        return new TcpProvider();
    }
}
