package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.memserver.MemserverConfig;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;

/**
 * The in-JVM setup the bridge's tests share: memservers on the tcp transport at free loopback ports, bridges, relays
 * and connections, each closed after the test in the reverse order of opening. Register it as a field
 * ({@code @RegisterExtension final InJvmCluster cluster = new InJvmCluster();}).
 */
final class InJvmCluster implements AfterEachCallback {
    private final List<AutoCloseable> open = new ArrayList<>();

    /** Closes {@code c} after the test (before whatever was opened earlier). */
    <T extends AutoCloseable> T open(T c) {
        open.add(c);
        return c;
    }

    /** A memserver lending {@code capacity} bytes over tcp at a free loopback port. */
    Memserver memserver(long capacity) throws Exception {
        return open(Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), capacity, null, "tcp")));
    }

    /** A bridge, started from {@code config}. */
    Bridge bridge(BridgeConfig config) {
        return open(Bridge.start(config));
    }

    /** The bridge's link to the memserver at {@code address}. */
    static MemserverLink link(Bridge b, InetSocketAddress address) {
        return b.memservers().stream().filter(l -> l.address().equals(address)).findFirst().orElseThrow();
    }

    /** How many regions of slab 0 of volume {@code disk} the memserver holds. */
    static long regionsOfSlab0(Memserver m) {
        return m.regions().stream().filter(r -> r.descriptor().tag().volume().equals("disk")
                && r.descriptor().tag().slab() == 0).count();
    }

    @Override
    public void afterEach(ExtensionContext context) throws Exception {
        Exception first = null;
        for (AutoCloseable c : open.reversed()) {
            try {
                c.close();
            } catch (Exception e) {
                if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        open.clear();
        if (first != null) {
            throw first;
        }
    }
}
