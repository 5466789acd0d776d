package dev.rbridge.rdma.tcp;

import dev.rbridge.common.tls.TestCertificates;
import dev.rbridge.common.tls.X509Credentials;
import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteListener;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import javax.net.ssl.SSLContext;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The memserver wire over TLS with the tcp provider: data verified through it in every size the link treats
 * differently, and each refusal (a client in clear, a memserver in clear, a certificate from another CA, a missing or
 * foreign client certificate) said in a sentence and counted by reason, the memserver serving others throughout.
 */
@Timeout(120)
class TcpTlsTest {
    static final String TOKEN = "tls-test";
    @TempDir
    Path dir;
    final TestCertificates ca = TestCertificates.authority("rbridge test CA");
    final ArenaRegionServiceForTests service = new ArenaRegionServiceForTests(TOKEN);
    RemoteListener listener;

    @AfterEach
    void stop() {
        if (listener != null) {
            listener.close();
        }
    }

    private InetSocketAddress listen(boolean tls, boolean verifyPeer) throws Exception {
        ListenParams p = new ListenParams().address(new InetSocketAddress("127.0.0.1", 0))
                .helloTimeout(Duration.ofSeconds(5));
        if (tls) {
            p.tls(X509Credentials.serverContext(ca.server(dir.resolve("server")), verifyPeer), verifyPeer);
        }
        listener = new TcpProvider().listen(p, service);
        return listener.address();
    }

    private static ConnectParams client(InetSocketAddress address, SSLContext tls) {
        return new ConnectParams().address(address).token(TOKEN).clientName("tls-test").tls(tls)
                .connectTimeout(Duration.ofSeconds(5)).operationTimeout(Duration.ofSeconds(20));
    }

    private SSLContext clientContext(String name, boolean withCertificate) {
        Path d = dir.resolve(name);
        return X509Credentials.clientContext(withCertificate ? ca.client(d) : ca.caOnly(d));
    }

    @Test
    void dataOfEverySizeGoesThroughTlsIntact() throws Exception {
        InetSocketAddress address = listen(true, false);
        for (int lanes : new int[]{1, 3}) {
            try (RemoteConnection c = new TcpProvider().connect(client(address, clientContext("client", false))
                    .lanes(lanes)); Arena arena = Arena.ofShared()) {
                long size = 32L << 20;
                RegionDescriptor r = c.allocate(RegionTag.scratch("tls"), size).get(10, TimeUnit.SECONDS);
                Random random = new Random(lanes);
                // A record and less (through the link's buffer), several records, and 4 MiB (straight into memory).
                int[] lengths = {1, 100, 4096, 16 << 10, 16 << 10 | 1, 64 << 10, 1 << 20, 4 << 20};
                long at = 0;
                List<long[]> written = new ArrayList<>();
                List<byte[]> contents = new ArrayList<>();
                List<CompletableFuture<Void>> writes = new ArrayList<>();
                for (int round = 0; round < 3; round++) {
                    for (int n : lengths) {
                        byte[] b = new byte[n];
                        random.nextBytes(b);
                        MemorySegment src = arena.allocate(n);
                        MemorySegment.copy(b, 0, src, ValueLayout.JAVA_BYTE, 0, n);
                        writes.add(c.write(r, at, src)); // all in flight at once
                        written.add(new long[]{at, n});
                        contents.add(b);
                        at += n + 7;
                    }
                }
                CompletableFuture.allOf(writes.toArray(CompletableFuture[]::new)).get(60, TimeUnit.SECONDS);
                List<CompletableFuture<Void>> reads = new ArrayList<>();
                List<MemorySegment> dsts = new ArrayList<>();
                for (long[] w : written) {
                    MemorySegment dst = arena.allocate(w[1]);
                    dsts.add(dst);
                    reads.add(c.read(r, w[0], dst));
                }
                CompletableFuture.allOf(reads.toArray(CompletableFuture[]::new)).get(60, TimeUnit.SECONDS);
                for (int i = 0; i < dsts.size(); i++) {
                    assertArrayEquals(contents.get(i), dsts.get(i).toArray(ValueLayout.JAVA_BYTE),
                            "extent " + i + " of " + written.get(i)[1] + " bytes, " + lanes + " lanes");
                }
                c.release(r).get(10, TimeUnit.SECONDS);
            }
        }
        assertEquals(0, service.refused().size(), "nobody refused: " + service.refused());
    }

    @Test
    void aClientInClearIsToldTheMemserverSpeaksTlsOnly() throws Exception {
        InetSocketAddress address = listen(true, false);
        RemoteMemoryException e = assertThrows(RemoteMemoryException.class,
                () -> new TcpProvider().connect(client(address, null)));
        assertTrue(e.getMessage().contains("speaks TLS only"), e.getMessage());
        assertTrue(e.getMessage().contains("--tls-certificates"), e.getMessage());
        assertEquals(1L, service.refused().get("tls_required"), service.refused().toString());
        stillServes(address, clientContext("ok", false));
    }

    @Test
    void aTlsClientIsToldTheMemserverAnsweredInClear() throws Exception {
        InetSocketAddress address = listen(false, false);
        RemoteMemoryException e = assertThrows(RemoteMemoryException.class,
                () -> new TcpProvider().connect(client(address, clientContext("client", false))));
        assertEquals(Status.CONNECT_FAILED, e.status());
        assertTrue(e.getMessage().contains("answered in clear"), e.getMessage());
    }

    @Test
    void aMemserverWhoseCertificateIsFromAnotherCaIsRefused() throws Exception {
        InetSocketAddress address = listen(true, false);
        SSLContext other = X509Credentials.clientContext(TestCertificates.authority("another CA")
                .caOnly(dir.resolve("other")));
        RemoteMemoryException e = assertThrows(RemoteMemoryException.class,
                () -> new TcpProvider().connect(client(address, other)));
        assertTrue(e.getMessage().contains("not signed by the CA"), e.getMessage());
        awaitRefused("tls_handshake", 1);
        stillServes(address, clientContext("ok", false));
    }

    @Test
    void mutualTlsRefusesClientsWithoutACertificateFromItsCa() throws Exception {
        InetSocketAddress address = listen(true, true);
        RemoteMemoryException none = assertThrows(RemoteMemoryException.class,
                () -> new TcpProvider().connect(client(address, clientContext("none", false))));
        assertTrue(none.getMessage().contains("TLS handshake failed"), none.getMessage());
        SSLContext foreign = X509Credentials.clientContext(TestCertificates.authority("another CA")
                .client(dir.resolve("foreign")));
        // The foreign client trusts only its own CA: give it ours to check the memserver, keep its own certificate.
        Path mixed = TestCertificates.authority("another CA").client(dir.resolve("mixed"));
        java.nio.file.Files.copy(dir.resolve("none").resolve("ca-cert.pem"), mixed.resolve("ca-cert.pem"),
                java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        RemoteMemoryException wrong = assertThrows(RemoteMemoryException.class,
                () -> new TcpProvider().connect(client(address, X509Credentials.clientContext(mixed))));
        assertTrue(wrong.getMessage().contains("TLS handshake failed"), wrong.getMessage());
        assertThrows(RemoteMemoryException.class, () -> new TcpProvider().connect(client(address, foreign)));
        awaitRefused("tls_handshake", 3);
        stillServes(address, clientContext("ok", true));
    }

    @Test
    void aSilentPeerIsCutOffByTheHelloGuardDuringTheHandshake() throws Exception {
        InetSocketAddress address = listen(true, false);
        try (SocketChannel raw = SocketChannel.open(address)) {
            ByteBuffer b = ByteBuffer.allocate(16);
            long start = System.nanoTime();
            assertEquals(-1, raw.read(b), "closed, not answered");
            assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(30));
        }
        awaitRefused("hello_timeout", 1);
    }

    /** The gate's refusal goes out before any TLS: the client must read it as the refusal it is. */
    @Test
    void aTlsClientTurnedAwayByTheConnectionGateIsToldWhy() throws Exception {
        ListenParams p = new ListenParams().address(new InetSocketAddress("127.0.0.1", 0))
                .limits(dev.rbridge.rdma.ConnectionLimits.of(1, 1, 1))
                .tls(X509Credentials.serverContext(ca.server(dir.resolve("server")), false), false);
        listener = new TcpProvider().listen(p, service);
        SSLContext tls = clientContext("client", false);
        try (RemoteConnection first = new TcpProvider().connect(client(listener.address(), tls))) {
            RemoteMemoryException e = assertThrows(RemoteMemoryException.class,
                    () -> new TcpProvider().connect(client(listener.address(), tls)));
            assertEquals(Status.NO_CAPACITY, e.status(), e.getMessage());
            assertFalse(e.getMessage().contains("does not run TLS"), e.getMessage());
        }
    }

    /** A certificate that expired while the memserver ran is called expired, not foreign. */
    @Test
    void anExpiredMemserverCertificateIsCalledExpired() throws Exception {
        ListenParams p = new ListenParams().address(new InetSocketAddress("127.0.0.1", 0))
                .tls(X509Credentials.serverContext(ca.server(dir.resolve("soon"), java.time.Instant.now()
                        .plusSeconds(2)), false), false);
        listener = new TcpProvider().listen(p, service);
        Thread.sleep(3000);
        RemoteMemoryException e = assertThrows(RemoteMemoryException.class,
                () -> new TcpProvider().connect(client(listener.address(), clientContext("client", false))));
        assertTrue(e.getMessage().contains("expired") && !e.getMessage().contains("not signed by"), e.getMessage());
    }

    /** A record altered on the way long after the handshake is reported as that, not as a failed handshake. */
    @Test
    void aRecordAlteredOnTheWayIsNotCalledAHandshakeFailure() throws Exception {
        InetSocketAddress address = listen(true, false);
        try (FlipOneBit relay = new FlipOneBit(address, 300_000); Arena arena = Arena.ofShared();
                RemoteConnection c = new TcpProvider().connect(client(relay.address(), clientContext("c", false)))) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("t"), 4 << 20).get(10, TimeUnit.SECONDS);
            MemorySegment dst = arena.allocate(1 << 20);
            java.util.concurrent.ExecutionException e = assertThrows(java.util.concurrent.ExecutionException.class,
                    () -> {
                        for (int i = 0; i < 4; i++) {
                            c.read(r, 0, dst).get(10, TimeUnit.SECONDS);
                        }
                    });
            String m = e.getCause().getMessage();
            assertFalse(m.contains("handshake"), m);
            assertTrue(m.contains("altered"), m);
        }
    }

    /** Relays both ways, flipping one bit of the memserver's stream at byte {@code at}. */
    static final class FlipOneBit extends dev.rbridge.rdma.TcpRelay {
        private final long at;

        FlipOneBit(InetSocketAddress target, long at) throws java.io.IOException {
            super(target);
            this.at = at;
        }

        @Override
        protected void relay(java.net.Socket client, java.net.Socket server) {
            start("up", () -> pump(client, server, -1));
            start("down", () -> pump(server, client, at));
        }

        private static void pump(java.net.Socket from, java.net.Socket to, long flipAt) {
            try (java.io.InputStream in = from.getInputStream(); java.io.OutputStream out = to.getOutputStream()) {
                byte[] b = new byte[8192];
                long pos = 0;
                int n;
                while ((n = in.read(b)) > 0) {
                    if (flipAt >= pos && flipAt < pos + n) {
                        b[(int) (flipAt - pos)] ^= 1;
                    }
                    pos += n;
                    out.write(b, 0, n);
                }
            } catch (java.io.IOException ignored) {
                // the test closed it
            }
        }
    }

    private void awaitRefused(String reason, long count) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (service.refused().getOrDefault(reason, 0L) < count && System.nanoTime() < until) {
            Thread.sleep(20);
        }
        assertEquals(count, service.refused().getOrDefault(reason, 0L), service.refused().toString());
    }

    private void stillServes(InetSocketAddress address, SSLContext tls) throws Exception {
        try (RemoteConnection c = new TcpProvider().connect(client(address, tls)); Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("after"), 1 << 20).get(10, TimeUnit.SECONDS);
            MemorySegment src = arena.allocate(4096).fill((byte) 0x5a);
            c.write(r, 4096, src).get(10, TimeUnit.SECONDS);
            MemorySegment dst = arena.allocate(4096);
            c.read(r, 4096, dst).get(10, TimeUnit.SECONDS);
            assertEquals(-1L, dst.mismatch(src));
            assertFalse(c.server().serverId() == null);
        }
    }
}
