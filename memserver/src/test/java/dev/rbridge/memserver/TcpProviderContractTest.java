package dev.rbridge.memserver;

import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.tcp.TcpProvider;

import java.net.InetSocketAddress;

/** The provider contract over the pure-Java tcp provider, the memserver in its own JVM (killed and frozen for real). */
class TcpProviderContractTest extends ProviderContractTest {
    @Override
    RemoteMemoryProvider provider() {
        return new TcpProvider();
    }

    @Override
    Target start(long capacity) throws Exception {
        MemServerProcess p = MemServerProcess.start(capacity, TOKEN);
        return new Target() {
            public InetSocketAddress address() {
                return p.address;
            }

            public void kill() throws Exception {
                p.kill();
            }

            public void revoke(long regionId) throws Exception {
                p.revoke(regionId);
            }

            public boolean hasWire() {
                return true;
            }

            public void freeze() throws Exception {
                p.signal("STOP");
            }

            public void thaw() throws Exception {
                p.signal("CONT");
            }

            public void close() throws Exception {
                p.close();
            }
        };
    }
}
