package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ConnectionGate;
import dev.rbridge.rdma.ConnectionLimits;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.wire.Admission;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The memserver end of a tcp connection skipping the data of a WRITE it refused. After a large WRITE it reads only the
 * next header (so the next data goes straight to region memory); it used to go on reading that little while it
 * skipped, 48 bytes a system call, ~350 000 calls for a refused 16 MiB. Counted through the connection's read count.
 */
@Timeout(60)
class TcpRefusedWriteTest {
    static final String TOKEN = "refused";

    @Test
    void aRefusedLargeWriteAfterALargeOneIsSkippedInLargeReads() throws Exception {
        ArenaRegionServiceForTests service = new ArenaRegionServiceForTests(TOKEN);
        ConnectionGate gate = new ConnectionGate(ConnectionLimits.DEFAULTS);
        try (ServerSocketChannel listener = ServerSocketChannel.open()
                .bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))) {
            CompletableFuture<TcpServerConnection> served = new CompletableFuture<>();
            Thread.ofPlatform().daemon().name("test-accept").start(() -> {
                try {
                    SocketChannel ch = listener.accept();
                    InetSocketAddress remote = (InetSocketAddress) ch.getRemoteAddress();
                    ConnectionGate.Admitted place = (ConnectionGate.Admitted) gate.admit(remote.getAddress(),
                            () -> {
                            });
                    TcpServerConnection server = new TcpServerConnection(ch, new Admission(service, remote,
                            place.slot()), new DirectBufferPool(TcpServerConnection.BUFFER, 2),
                            ConnectParams.TCP_CONGESTION_SYSTEM, 10_000, c -> {
                            });
                    Thread.ofPlatform().daemon().name("rdma-tcp-conn-test").start(server);
                    served.complete(server);
                } catch (IOException | RuntimeException e) {
                    served.completeExceptionally(e);
                }
            });
            try (RemoteConnection c = new TcpProvider().connect(new ConnectParams()
                    .address((InetSocketAddress) listener.getLocalAddress()).token(TOKEN).clientName("refused")
                    .operationTimeout(Duration.ofSeconds(30)));
                    Arena arena = Arena.ofShared()) {
                TcpServerConnection server = served.get(10, TimeUnit.SECONDS);
                int large = 16 << 20;
                RegionDescriptor r = c.allocate(RegionTag.scratch("refused"), large).get(10, TimeUnit.SECONDS);
                c.write(r, 0, arena.allocate(1 << 20)).get(10, TimeUnit.SECONDS); // large: the next header alone
                long before = server.socketReads();

                RegionDescriptor wrongKey = new RegionDescriptor(r.id(), r.length(), r.key() + 1, r.tag());
                ExecutionException e = assertThrows(ExecutionException.class,
                        () -> c.write(wrongKey, 0, arena.allocate(large)).get(20, TimeUnit.SECONDS));
                assertEquals(Status.ACCESS_DENIED,
                        assertInstanceOf(RemoteMemoryException.class, e.getCause()).status());
                c.flush().get(20, TimeUnit.SECONDS); // its data is all skipped by now

                long reads = server.socketReads() - before;
                assertTrue(reads < large / (8 << 10), "skipping " + large + " bytes took " + reads + " reads");
            }
        }
    }
}
