package dev.rbridge.rdma.ucx;

import dev.rbridge.common.tls.TestCertificates;
import dev.rbridge.common.tls.X509Credentials;
import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import javax.net.ssl.SSLContext;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The ucx provider's control connection over TLS (UCX_TLS=tcp, as every test here): the greeting, UCX_CONNECT and
 * MAP replies and the memserver's INVALIDATE pushes all go through it and the data path works behind it; a client in
 * clear is refused in a sentence.
 */
@Tag("interop")
@Timeout(120)
class UcxTlsTest {
    static final String TOKEN = "ucx-tls";
    @TempDir
    Path dir;
    final TestCertificates ca = TestCertificates.authority("rbridge ucx test CA");
    final ArenaRegionServiceForTests service = new ArenaRegionServiceForTests(TOKEN);
    UcxListener listener;

    @AfterEach
    void stop() {
        if (listener != null) {
            listener.close();
        }
    }

    private ConnectParams params(SSLContext tls) {
        return new ConnectParams().address(listener.address()).token(TOKEN).clientName("ucx-tls").tls(tls)
                .operationTimeout(Duration.ofSeconds(30));
    }

    @Test
    void theControlConnectionRunsInTlsAndTheDataPathBehindIt() throws Exception {
        listener = UcxListener.start(new ListenParams().address(new InetSocketAddress("127.0.0.1", 0))
                .tls(X509Credentials.serverContext(ca.server(dir.resolve("server")), false), false), service);
        SSLContext tls = X509Credentials.clientContext(ca.caOnly(dir.resolve("client")));
        try (RemoteConnection c = new UcxProvider().connect(params(tls)); Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("ucx-tls"), 4 << 20).get(30, TimeUnit.SECONDS);
            byte[] data = new byte[1 << 20];
            new Random(3).nextBytes(data);
            MemorySegment src = arena.allocate(data.length);
            MemorySegment.copy(data, 0, src, ValueLayout.JAVA_BYTE, 0, data.length);
            c.write(r, 4096, src).get(30, TimeUnit.SECONDS);
            MemorySegment dst = arena.allocate(data.length);
            c.read(r, 4096, dst).get(30, TimeUnit.SECONDS);
            assertArrayEquals(data, dst.toArray(ValueLayout.JAVA_BYTE));
            // An INVALIDATE pushed over TLS is answered, and the next operation maps afresh.
            listener.invalidate(List.of(r.id()), false).get(30, TimeUnit.SECONDS);
            assertTrue(!listener.registered(r.id()), "withdrawn");
            c.read(r, 4096, dst.fill((byte) 0)).get(30, TimeUnit.SECONDS);
            assertArrayEquals(data, dst.toArray(ValueLayout.JAVA_BYTE));
        }
        RemoteMemoryException clear = assertThrows(RemoteMemoryException.class,
                () -> new UcxProvider().connect(params(null)));
        assertTrue(clear.getMessage().contains("speaks TLS only"), clear.getMessage());
        assertEquals(1L, service.refused().get("tls_required"), service.refused().toString());
    }
}
