package dev.rbridge.bridge.memservers;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetSocketAddress;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import dev.rbridge.memserver.Memserver;
import dev.rbridge.memserver.MemserverConfig;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Providers;
import dev.rbridge.rdma.RemoteConnection;

/** What a {@link MemserverLink} tells placement about itself. */
@Timeout(30)
class MemserverLinkTest {

    @Test
    void aLinkWhoseConnectionClosedIsNotUpBeforeTheHealthDutyMarksItDown() throws Exception {
        try (Memserver server = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 1 << 20,
                null, "local"))) {
            MemserverLink link = new MemserverLink(server.address(), label -> RemoteOpMetrics.NONE);
            assertFalse(link.up(), "a link never connected is not up");
            RemoteConnection c = Providers.byName("local").connect(new ConnectParams().address(server.address()));
            link.up(c, "id", 1 << 20, 1 << 20);
            assertTrue(link.up(), "connected and open: up");
            c.close(); // the peer went away; nobody has called link.down() yet
            assertNull(link.connection(), "a closed connection is not handed out");
            assertFalse(link.up(), "placement must not choose a memserver whose connection is closed");
        }
    }
}
