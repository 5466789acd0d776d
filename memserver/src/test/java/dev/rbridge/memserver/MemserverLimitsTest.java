package dev.rbridge.memserver;

import dev.rbridge.common.Printable;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ConnectionLimits;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.tcp.TcpProvider;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.DataInputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The memserver's limits on what clients may make it hold, each hit by a real client over tcp. */
@Timeout(120)
@Tag("fault")
class MemserverLimitsTest {
    static final String TOKEN = MemserverFloodTest.TOKEN;

    static Memserver start(ConnectionLimits limits, int maxRegions) throws Exception {
        return Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 256L << 20, TOKEN, "tcp",
                false, false, ConnectParams.TCP_CONGESTION_DEFAULT, limits, maxRegions));
    }

    static RemoteConnection connect(Memserver m, String name) throws RemoteMemoryException {
        return new TcpProvider().connect(new ConnectParams().address(m.address()).token(TOKEN).clientName(name)
                .connectTimeout(Duration.ofSeconds(5)).operationTimeout(Duration.ofSeconds(5)));
    }

    static long refused(Memserver m, String reason) {
        return m.stats().refused().getOrDefault(reason, 0L);
    }

    @Test
    void aClientBeyondTheConnectionLimitIsToldWhy() throws Exception {
        try (Memserver m = start(new ConnectionLimits(2, 2, 2, 2), MemserverConfig.MAX_REGIONS_DEFAULT);
                RemoteConnection a = connect(m, "a"); RemoteConnection b = connect(m, "b")) {
            RemoteMemoryException e = assertThrows(RemoteMemoryException.class, () -> connect(m, "c"));
            assertEquals(Status.NO_CAPACITY, e.status(), e.getMessage());
            assertTrue(e.getMessage().contains("takes no more connections"), e.getMessage());
            assertEquals(1, refused(m, "peer_limit") + refused(m, "connection_limit"));
            a.close();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (m.clients().size() > 1 && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            try (RemoteConnection c = connect(m, "c")) {
                assertTrue(c.isOpen(), "a place freed by a client that left is taken again");
            }
        }
    }

    @Test
    void silentConnectionsMakeWayForNewcomersFromTheirOwnAddressAndFromOthers() throws Exception {
        try (Memserver m = start(new ConnectionLimits(100, 50, 4, 2), MemserverConfig.MAX_REGIONS_DEFAULT)) {
            List<Socket> flood = MemserverFloodTest.silent(m.address(), 16); // 127.0.0.2 and .3, eight each
            try {
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                while (refused(m, "unauthenticated_peer_limit") < 12 && System.nanoTime() < deadline) {
                    Thread.sleep(10);
                }
                assertEquals(12, refused(m, "unauthenticated_peer_limit"), "each address keeps two of its eight");
                // The newest two of each address stay: an honest client's greeting is always its address's newest.
                for (int i = 0; i < flood.size(); i++) {
                    boolean oldest = i % 8 < 6;
                    assertEquals(oldest, droppedWithin(flood.get(i), oldest ? 5000 : 100), "connection " + (i % 8)
                            + " of 127.0.0." + (2 + i / 8) + (oldest ? " should have made way" : " should stay"));
                }
                try (RemoteConnection honest = connect(m, "honest")) {
                    assertTrue(honest.isOpen());
                }
                assertEquals(1, refused(m, "unauthenticated_evicted"), m.stats().refused().toString());
            } finally {
                MemserverFloodTest.closeAll(flood);
            }
        }
    }

    @Test
    void silentConnectionsFromAClientsOwnAddressCannotLockItOut() throws Exception {
        // A local process, or a NAT the bridge sits behind, shares the bridge's address: its silent connections fill
        // that address's unauthenticated places, and the bridge must still get in.
        try (Memserver m = start(ConnectionLimits.DEFAULTS, MemserverConfig.MAX_REGIONS_DEFAULT)) {
            List<Socket> flood = new ArrayList<>();
            try {
                for (int i = 0; i < ConnectionLimits.MAX_UNAUTHENTICATED_PER_PEER_DEFAULT; i++) {
                    Socket s = new Socket();
                    s.bind(new InetSocketAddress("127.0.0.1", 0));
                    s.connect(m.address(), 2000);
                    flood.add(s);
                }
                try (RemoteConnection honest = connect(m, "honest")) {
                    assertTrue(honest.isOpen());
                }
                assertEquals(1, refused(m, "unauthenticated_peer_limit"), m.stats().refused().toString());
                assertTrue(droppedWithin(flood.getFirst(), 5000), "the oldest silent connection made way");
                for (Socket s : flood.subList(1, flood.size())) {
                    assertFalse(droppedWithin(s, 10), "only the oldest made way");
                }
            } finally {
                MemserverFloodTest.closeAll(flood);
            }
        }
    }

    /** True if the memserver closed {@code s} within {@code millis}. */
    private static boolean droppedWithin(Socket s, long millis) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        do {
            if (MemserverFloodTest.dropped(s)) {
                return true;
            }
        } while (System.nanoTime() < deadline);
        return false;
    }

    @Test
    void aGreetingLargerThanAnyHonestOneIsRefused() throws Exception {
        try (Memserver m = start(ConnectionLimits.DEFAULTS, MemserverConfig.MAX_REGIONS_DEFAULT);
                Socket s = new Socket()) {
            byte[] name = new byte[8000];
            ByteBuffer hello = ByteBuffer.allocate(24 + 4 + TOKEN.length() + name.length).order(ByteOrder.LITTLE_ENDIAN)
                    .putInt(0x4D524252).putShort((short) 1).putShort((short) 1).putLong(1).putInt(0)
                    .putInt(4 + TOKEN.length() + name.length).putShort((short) TOKEN.length())
                    .put(TOKEN.getBytes(StandardCharsets.UTF_8)).putShort((short) name.length).put(name);
            s.connect(m.address(), 5000);
            s.setSoTimeout(10_000);
            s.getOutputStream().write(hello.array());
            byte[] reply = new DataInputStream(s.getInputStream()).readNBytes(24 + 200);
            ByteBuffer r = ByteBuffer.wrap(reply).order(ByteOrder.LITTLE_ENDIAN);
            assertEquals(Status.BAD_REQUEST.code(), r.getInt(16));
            String message = new String(reply, 26, reply.length - 26, StandardCharsets.UTF_8);
            assertTrue(message.contains("HELLO of " + (4 + TOKEN.length() + name.length) + " bytes (at most 4096)"),
                    message);
            assertEquals(1, refused(m, "malformed"));
        }
    }

    @Test
    void aListenerThatCannotAcceptMakesTheMemserverNotReady() throws Exception {
        try (Memserver m = start(ConnectionLimits.DEFAULTS, MemserverConfig.MAX_REGIONS_DEFAULT)) {
            assertNull(m.notReadyReason());
            Thread accept = Thread.getAllStackTraces().keySet().stream()
                    .filter(t -> t.getName().equals("rdma-tcp-accept-" + m.address().getPort())).findFirst()
                    .orElseThrow();
            accept.interrupt(); // closes the listening socket under the thread blocked in accept
            accept.join(5000);
            String why = m.notReadyReason();
            assertNotNull(why, "a memserver that cannot take new clients says it is ready");
            assertTrue(why.contains("takes no new clients") && why.contains("closed unexpectedly"), why);
        }
        try (Memserver m = start(ConnectionLimits.DEFAULTS, MemserverConfig.MAX_REGIONS_DEFAULT)) {
            m.drain();
            assertTrue(m.notReadyReason().startsWith("draining"), m.notReadyReason());
        }
    }

    @Test
    void regionsAreCountedAndListedWithNamesCutShort() throws Exception {
        try (Memserver m = start(ConnectionLimits.DEFAULTS, 300);
                RemoteConnection c = connect(m, "x".repeat(2000) + "\nforged log line")) {
            for (int i = 0; i < 300; i++) {
                c.allocate(new RegionTag("v".repeat(255), i, 0, 1), 4096).get(5, TimeUnit.SECONDS);
            }
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> c.allocate(RegionTag.scratch("one-too-many"), 4096).get(5, TimeUnit.SECONDS));
            RemoteMemoryException r = (RemoteMemoryException) e.getCause();
            assertEquals(Status.NO_CAPACITY, r.status());
            assertTrue(r.getMessage().contains("limit of 300 regions (--max-regions)"), r.getMessage());
            List<RegionInfo> listed = c.list().get(5, TimeUnit.SECONDS); // ~130 KiB: through the reply buffer
            assertEquals(300, listed.size());
            assertEquals("x".repeat(Memserver.MAX_CLIENT_NAME), listed.getFirst().owner());
            assertEquals(300, m.regionCount());
        }
    }

    /** A listing far larger than the kernel buffers between the memserver and a client that reads none of it. */
    static final int LISTED = 24_000;

    /** A raw client with the token that greets and asks for a LIST, and then reads nothing at all. */
    static Socket stalledLister(Memserver m) throws Exception {
        Socket s = new Socket();
        s.setReceiveBufferSize(4096);
        s.connect(m.address(), 5000);
        s.setSoTimeout(10_000);
        byte[] name = "stalled".getBytes(StandardCharsets.UTF_8);
        ByteBuffer hello = ByteBuffer.allocate(24 + 4 + TOKEN.length() + name.length).order(ByteOrder.LITTLE_ENDIAN)
                .putInt(0x4D524252).putShort((short) 1).putShort((short) 1).putLong(1).putInt(0)
                .putInt(4 + TOKEN.length() + name.length).putShort((short) TOKEN.length())
                .put(TOKEN.getBytes(StandardCharsets.UTF_8)).putShort((short) name.length).put(name);
        s.getOutputStream().write(hello.array());
        DataInputStream in = new DataInputStream(s.getInputStream());
        ByteBuffer h = ByteBuffer.wrap(in.readNBytes(24)).order(ByteOrder.LITTLE_ENDIAN);
        assertEquals(0, h.getInt(16), "HELLO refused");
        in.readNBytes(h.getInt(20));
        s.getOutputStream().write(ByteBuffer.allocate(24).order(ByteOrder.LITTLE_ENDIAN).putInt(0x4D524252)
                .putShort((short) 1).putShort((short) 4).putLong(2).putInt(0).putInt(0).array());
        return s;
    }

    @Test
    void aClientThatDoesNotReadItsListingIsCutOffAndGivesItsPlaceBack() throws Exception {
        try (Memserver m = start(ConnectionLimits.DEFAULTS, MemserverConfig.MAX_REGIONS_DEFAULT);
                RemoteConnection c = connect(m, "x".repeat(Memserver.MAX_CLIENT_NAME))) {
            // ~10 MB of listing, more than the 2 x 4 MiB of socket buffer the kernel gives the memserver's side.
            for (int done = 0; done < LISTED;) {
                List<java.util.concurrent.CompletableFuture<?>> batch = new ArrayList<>();
                for (int i = 0; i < 1000 && done < LISTED; i++, done++) {
                    batch.add(c.allocate(new RegionTag("v".repeat(255), done, 0, 1), 4096));
                }
                for (var f : batch) {
                    f.get(30, TimeUnit.SECONDS);
                }
            }
            // As many clients as there are listing places ask for the listing and never read it: before, each held
            // its listing in memory for as long as it stayed connected, and any number of them could.
            List<Socket> stalled = new ArrayList<>();
            try {
                for (int i = 0; i < Memserver.CONCURRENT_LISTINGS; i++) {
                    stalled.add(stalledLister(m));
                }
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                while (m.listingsHeld() < Memserver.CONCURRENT_LISTINGS && System.nanoTime() < deadline) {
                    Thread.sleep(10);
                }
                assertEquals(Memserver.CONCURRENT_LISTINGS, m.listingsHeld(), "the stalled listings hold their places");
                // Another client is told to try again rather than made to wait behind them.
                long asked = System.nanoTime();
                ExecutionException busy = assertThrows(ExecutionException.class,
                        () -> c.list().get(10, TimeUnit.SECONDS));
                assertEquals(Status.NO_CAPACITY, ((RemoteMemoryException) busy.getCause()).status());
                assertTrue(busy.getCause().getMessage().contains("try again"), busy.getCause().getMessage());
                assertTrue(System.nanoTime() - asked < TimeUnit.SECONDS.toNanos(5), "waited too long for a place");

                Thread.sleep(10_000 + 2_000); // the hello timeout, and some
                for (Socket s : stalled) {
                    assertTrue(cutShort(s), "a client that read none of its listing for longer than the hello "
                            + "timeout is still connected");
                }
                assertEquals(0, m.listingsHeld(), "the places of the clients cut off are free again");
            } finally {
                MemserverFloodTest.closeAll(stalled);
            }
            List<RegionInfo> listed = c.list().get(10, TimeUnit.SECONDS);
            assertEquals(LISTED, listed.size());
        }
    }

    /** True if the memserver closed {@code s} before sending the whole reply it announced (reads what it sent). */
    private static boolean cutShort(Socket s) throws Exception {
        s.setSoTimeout(2000);
        DataInputStream in = new DataInputStream(s.getInputStream());
        byte[] header = in.readNBytes(24);
        if (header.length < 24) {
            return true;
        }
        long announced = Integer.toUnsignedLong(ByteBuffer.wrap(header).order(ByteOrder.LITTLE_ENDIAN).getInt(20));
        byte[] buf = new byte[64 << 10];
        long got = 0;
        try {
            for (int n; (n = in.read(buf)) >= 0;) {
                got += n;
            }
            return got < announced;
        } catch (java.net.SocketTimeoutException e) {
            return false; // the listing came whole and the connection stays
        } catch (java.net.SocketException e) {
            return got < announced; // reset
        }
    }

    @Test
    void aListingHoldsItsPlaceUntilClosed() throws Exception {
        try (Memserver m = start(ConnectionLimits.DEFAULTS, MemserverConfig.MAX_REGIONS_DEFAULT)) {
            RegionService.Session s =
                    m.open(new RegionService.Credential.Token(TOKEN), "lister", new InetSocketAddress("127.0.0.1", 1));
            List<RegionService.Listing> held = new ArrayList<>();
            for (int i = 0; i < Memserver.CONCURRENT_LISTINGS; i++) {
                held.add(s.listing());
            }
            RemoteMemoryException e = assertThrows(RemoteMemoryException.class, s::listing);
            assertEquals(Status.NO_CAPACITY, e.status());
            held.getFirst().close();
            held.getFirst().close(); // idempotent: gives back one place, once
            assertEquals(Memserver.CONCURRENT_LISTINGS - 1, m.listingsHeld());
            held.set(0, s.listing());
            held.forEach(RegionService.Listing::close);
            assertEquals(0, m.listingsHeld());
            s.closed();
        }
    }

    @Test
    void namesArePrintableAndCutAtACharacterBoundary() {
        assertEquals("a?b?c", Printable.cut("a\nb\u202Ec", 100));
        assertEquals("ab", Printable.cut("ab\u00e9", 3), "é takes two bytes, one is left");
        assertEquals("ab\u00e9", Printable.cut("ab\u00e9", 4));
    }

    @Test
    void aClientHoldsALimitedNumberOfLeases() throws Exception {
        try (Memserver m = start(ConnectionLimits.DEFAULTS, MemserverConfig.MAX_REGIONS_DEFAULT);
                RemoteConnection c = connect(m, "hoarder"); RemoteConnection other = connect(m, "other")) {
            for (int i = 0; i < Leases.MAX_LEASES_PER_CLIENT; i++) {
                c.lease("vol-" + i, "hoarder", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS);
            }
            c.lease("vol-0", "hoarder", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS); // renewals still work
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> c.lease("vol-x", "hoarder", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS));
            assertEquals(Status.NO_CAPACITY, ((RemoteMemoryException) e.getCause()).status());
            other.lease("vol-x", "other", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS);
            c.unlease("vol-1", "hoarder").get(5, TimeUnit.SECONDS);
            c.lease("vol-y", "hoarder", Duration.ofSeconds(30)).get(5, TimeUnit.SECONDS);
        }
    }
}
