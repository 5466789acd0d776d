package dev.rbridge.memserver;

import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.ucx.UcxProvider;

import java.net.InetSocketAddress;

/**
 * The provider contract over the ucx provider (JUCX), the memserver in its own JVM (killed and frozen for real), with
 * UCX_TLS=tcp on both sides: UCX emulates GET/PUT with active messages there, which is what this host can run.
 */
class UcxProviderContractTest extends ProviderContractTest {
    @Override
    RemoteMemoryProvider provider() {
        return new UcxProvider();
    }

    @Override
    Target start(long capacity) throws Exception {
        MemServerProcess p = MemServerProcess.start(capacity, TOKEN, "ucx");
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
