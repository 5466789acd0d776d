package dev.rbridge.memserver;

import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.local.LocalProvider;

import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.Map;

/**
 * The provider contract over the in-process provider. "Killing" the memserver stops it inside this JVM, which is
 * what the embedded mode can suffer; freezing and wire corruption do not apply and are skipped with that reason.
 */
class LocalProviderContractTest extends ProviderContractTest {
    @Override
    RemoteMemoryProvider provider() {
        return new LocalProvider();
    }

    @Override
    Target start(long capacity, Duration helloTimeout) throws Exception {
        MemserverConfig config = new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), capacity, TOKEN, "local");
        Memserver m = helloTimeout == null ? Memserver.start(config) : Memserver.start(config, helloTimeout);
        return new Target() {
            public InetSocketAddress address() {
                return m.address();
            }

            public void kill() {
                m.close();
            }

            public void revoke(long regionId) {
                if (!m.revoke(regionId)) {
                    throw new IllegalStateException("no region " + regionId);
                }
            }

            public boolean hasWire() {
                return false;
            }

            public void freeze() {
                throw new UnsupportedOperationException();
            }

            public void thaw() {
                throw new UnsupportedOperationException();
            }

            public long residentBytes() {
                return m.stats().residentBytes();
            }

            public long lingeringBytes() {
                return m.stats().lingeringBytes();
            }

            public Map<String, Long> refused() {
                return m.stats().refused();
            }

            public boolean alive() {
                return true; // in this JVM: a memserver that aborted the process would have taken the test along
            }

            public String logText() {
                return "";
            }

            public void close() {
                m.close();
            }
        };
    }
}
