package dev.rbridge.memserver;

import org.junit.jupiter.api.Tag;
import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.tcp.TcpProvider;

import java.time.Duration;
import java.util.List;

/** The provider contract over the pure-Java tcp provider, the memserver in its own JVM (killed and frozen for real). */
@Tag("fault")
class TcpProviderContractTest extends ProviderContractTest {
    @Override
    RemoteMemoryProvider provider() {
        return new TcpProvider();
    }

    @Override
    Target start(long capacity, Duration helloTimeout) throws Exception {
        return target(MemserverProcess.start(capacity, TOKEN, "tcp", List.of(), helloTimeout));
    }
}
