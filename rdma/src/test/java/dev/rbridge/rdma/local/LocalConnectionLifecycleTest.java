package dev.rbridge.rdma.local;

import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteListener;
import dev.rbridge.rdma.RemoteMemoryException;
import org.junit.jupiter.api.Test;

import java.net.InetSocketAddress;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The connection lifecycle ({@link dev.rbridge.rdma.ConnectionLifecycle}) as the local provider lives it: closed once,
 * by whichever cause comes first, which then stays in force for every later operation.
 */
class LocalConnectionLifecycleTest {
    private static final String TOKEN = "lifecycle-token";

    private static RemoteListener listen() {
        return new LocalProvider().listen(new ListenParams().address(new InetSocketAddress("127.0.0.1", 0)),
                new ArenaRegionServiceForTests(TOKEN));
    }

    private static RemoteConnection connect(RemoteListener l) throws RemoteMemoryException {
        return new LocalProvider().connect(new ConnectParams().address(l.address()).token(TOKEN));
    }

    private static RemoteMemoryException failure(CompletableFuture<?> f) {
        ExecutionException e = assertThrows(ExecutionException.class, f::get);
        return assertInstanceOf(RemoteMemoryException.class, e.getCause());
    }

    @Test
    void aCloseByTheClientFailsLaterOperationsAndTearsDownOnce() throws Exception {
        try (RemoteListener l = listen()) {
            RemoteConnection c = connect(l);
            assertTrue(c.isOpen());
            assertEquals(1, l.connectionCount());
            c.close();
            c.close(); // idempotent
            assertFalse(c.isOpen());
            assertEquals(0, l.connectionCount(), "the teardown told the listener");
            RemoteMemoryException e = failure(c.list());
            assertEquals(RemoteMemoryException.Status.CONNECTION_LOST, e.status());
            assertTrue(e.getMessage().endsWith("was closed by this client"), e.getMessage());
        }
    }

    @Test
    void theFirstCauseStaysInForce() throws Exception {
        RemoteConnection c;
        try (RemoteListener l = listen()) {
            c = connect(l);
        } // the memserver stops first
        c.close();
        RemoteMemoryException e = failure(c.info());
        assertTrue(e.getMessage().endsWith("stopped"), e.getMessage());
    }
}
