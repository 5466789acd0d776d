package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.Closeable;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What the memserver and lease attacks share: a cluster under attack (two memservers with a token and metrics, a
 * bridge serving a replicated volume), the well-behaved client beside the attack, a raw client speaking the memserver's
 * wire (version 1, docs/wire-formats.md) to do what real clients never do, and the checks every attack must pass.
 */
@Tag("fault")
abstract class MemserverAttackTest {
    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    static final String TOKEN = "attack-token";
    static final String VOLUME = "disk";
    static final Duration SERVED_WITHIN = Duration.ofSeconds(2);
    /**
     * A memserver's direct memory under attack: its own few buffers and those of the bridge's connections, far below
     * what even a small flood took before (half a megabyte per connection).
     */
    static final long DIRECT_BOUND = 16L << 20;

    static final int HELLO = 1;
    static final int ALLOCATE = 2;
    static final int OPEN = 3;
    static final int LIST = 4;
    static final int RELEASE = 5;
    static final int LEASE = 7;
    static final int UNLEASE = 8;
    static final int READ = 16;
    static final int WRITE = 17;
    static final int STATUS_LEASE_HELD = 10;
    static final int STATUS_ACCESS_DENIED = 4;
    static final int STATUS_BAD_REQUEST = 1;
    static final int STATUS_NO_CAPACITY = 6;

    /** Two memservers, each lending 512M, and a bridge serving {@value #VOLUME} at R=2; more set up by the caller. */
    static ServeCluster.Builder cluster(String name) {
        return ServeCluster.builder(name).memservers(2).capacity("512M").token(TOKEN).metrics(true)
                .volume(VOLUME + ",size=256M,replicas=2,slab=16M");
    }

    static ServeCluster start(ServeCluster.Builder b) throws IOException {
        return LOGS.watch(b.start());
    }

    /** The well-behaved client on {@code volume}, served for a while before the attack starts. */
    static WellBehavedClient wellBehaved(ServeCluster c, String volume) throws Exception {
        WellBehavedClient w = WellBehavedClient.start(c.uri(volume), 0);
        w.awaitCycles(20, Duration.ofSeconds(60));
        w.resetLongestGap();
        return w;
    }

    static InetSocketAddress address(ServeCluster.Memserver m) {
        String[] hp = m.address().split(":");
        return new InetSocketAddress(hp[0], Integer.parseInt(hp[1]));
    }

    /** Direct memory of every memserver stays under {@link #DIRECT_BOUND}, from their own gauges. */
    static void assertDirectMemoryBounded(ServeCluster c) throws Exception {
        for (ServeCluster.Memserver m : c.memservers()) {
            long direct = Scrape.directMemory(m.metricsAddress());
            assertTrue(direct < DIRECT_BOUND, "memserver " + m.address() + " holds " + (direct >> 10)
                    + " KiB of direct memory (bound " + (DIRECT_BOUND >> 10) + " KiB)");
        }
    }

    /** How many connections memserver {@code m} counts as refused for {@code reason}. */
    static double refused(ServeCluster.Memserver m, String reason) throws Exception {
        return Scrape.sum(Scrape.metrics(m.metricsAddress()), "rbridge_memserver_refused_connections_total",
                "reason=\"" + reason + "\"");
    }

    /**
     * After the attack everything serves as before: the well-behaved client keeps its pace, no memserver was declared
     * down, no slab degraded, every memserver is ready and serves a new client with the token within the bound.
     */
    static void assertServesAsBefore(ServeCluster c, WellBehavedClient w) throws Exception {
        w.awaitCycles(20, Duration.ofSeconds(30));
        w.assertServedWithin(SERVED_WITHIN);
        ClusterIntegrity.assertIntact(c);
        for (ServeCluster.Memserver m : c.memservers()) {
            assertNewClientServed(m);
            HttpResponse<String> ready = HttpClient.newHttpClient().send(HttpRequest.newBuilder(
                    URI.create("http://" + m.metricsAddress() + "/readyz")).timeout(Duration.ofSeconds(5)).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(200, ready.statusCode(), "memserver " + m.address() + " /readyz: " + ready.body());
        }
    }

    /** A new client with the token, from 127.0.0.1, greets, allocates, writes, reads and releases within the bound. */
    static void assertNewClientServed(ServeCluster.Memserver m) throws Exception {
        long start = System.nanoTime();
        try (Raw r = Raw.connect(address(m), null)) {
            Reply hello = r.hello(TOKEN, "after-the-attack");
            assertEquals(0, hello.status, "HELLO: " + hello.message());
            Reply a = r.call(ALLOCATE, r.body(8 + 2 + 5 + 20).putLong(4096).putShort((short) 5)
                    .put("probe".getBytes(StandardCharsets.US_ASCII)).putLong(0).putInt(0).putLong(0));
            assertEquals(0, a.status, "ALLOCATE: " + a.message());
            long region = a.body.getLong(0);
            long key = a.body.getLong(16);
            Reply wr = r.call(WRITE, r.body(24 + 8).putLong(region).putLong(key).putLong(0).putLong(0x5A5A5A5AL));
            assertEquals(0, wr.status, "WRITE: " + wr.message());
            Reply rd = r.call(READ, r.body(28).putLong(region).putLong(key).putLong(0).putInt(8));
            assertEquals(0, rd.status, "READ: " + rd.message());
            assertEquals(0x5A5A5A5AL, rd.body.getLong(0));
            assertEquals(0, r.call(RELEASE, r.body(16).putLong(region).putLong(key)).status);
        }
        long took = (System.nanoTime() - start) / 1_000_000;
        assertTrue(took < SERVED_WITHIN.toMillis(), "a new client took " + took + " ms on " + m.address());
    }

    /** Loopback address number {@code n} (127.0.0.n), to play a different peer than the bridge on 127.0.0.1. */
    static String loopback(int n) {
        return "127." + (n >> 16 & 0xFF) + "." + (n >> 8 & 0xFF) + "." + (n & 0xFF);
    }

    /** A reply: its status (0 success) and body. */
    record Reply(int status, ByteBuffer body) {
        /** The error text of a failed reply. */
        String message() {
            if (status == 0 || body.limit() < 2) {
                return "";
            }
            int n = Short.toUnsignedInt(body.getShort(0));
            return new String(body.array(), 2, Math.min(n, body.limit() - 2), StandardCharsets.UTF_8);
        }
    }

    /** A raw memserver client over a blocking socket; every read has a timeout, so a test never hangs on it. */
    static final class Raw implements Closeable {
        final Socket socket;
        private final OutputStream out;
        private final DataInputStream in;
        private long nextId = 1;

        private Raw(Socket socket) throws IOException {
            this.socket = socket;
            this.out = socket.getOutputStream();
            this.in = new DataInputStream(socket.getInputStream());
        }

        /** Connects to {@code to} from {@code from} (a loopback address to bind, or null for any). */
        static Raw connect(InetSocketAddress to, String from) throws IOException {
            Socket s = new Socket();
            try {
                if (from != null) {
                    s.bind(new InetSocketAddress(InetAddress.getByName(from), 0));
                }
                s.connect(to, 5_000);
                s.setSoTimeout(10_000);
                s.setTcpNoDelay(true);
                return new Raw(s);
            } catch (IOException e) {
                s.close();
                throw e;
            }
        }

        ByteBuffer body(int capacity) {
            return ByteBuffer.allocate(capacity).order(ByteOrder.LITTLE_ENDIAN);
        }

        static ByteBuffer string(ByteBuffer b, String s) {
            byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
            return b.putShort((short) bytes.length).put(bytes);
        }

        static int stringLength(String s) {
            return 2 + s.getBytes(StandardCharsets.UTF_8).length;
        }

        Reply hello(String token, String name) throws IOException {
            return call(HELLO, string(string(body(stringLength(token) + stringLength(name)), token), name));
        }

        /** LEASE {@code volume} for {@code owner}, asking for {@code ttlMillis}. */
        Reply lease(String volume, String owner, long ttlMillis) throws IOException {
            return call(LEASE, string(string(body(stringLength(volume) + stringLength(owner) + 8), volume), owner)
                    .putLong(ttlMillis));
        }

        Reply unlease(String volume, String owner) throws IOException {
            return call(UNLEASE, string(string(body(stringLength(volume) + stringLength(owner)), volume), owner));
        }

        /** Sends a request with {@code body} (written up to its position) and reads its reply. */
        Reply call(int opcode, ByteBuffer body) throws IOException {
            send(opcode, body.flip());
            return reply();
        }

        /** Sends a request without waiting for the reply. */
        void send(int opcode, ByteBuffer body) throws IOException {
            ByteBuffer h = ByteBuffer.allocate(24 + body.remaining()).order(ByteOrder.LITTLE_ENDIAN)
                    .putInt(0x4D524252).putShort((short) 1).putShort((short) opcode).putLong(nextId++).putInt(0)
                    .putInt(body.remaining()).put(body);
            out.write(h.array());
            out.flush();
        }

        /** Writes raw bytes, garbage included. */
        void raw(byte[] bytes) throws IOException {
            out.write(bytes);
            out.flush();
        }

        Reply reply() throws IOException {
            byte[] header = new byte[24];
            in.readFully(header);
            ByteBuffer h = ByteBuffer.wrap(header).order(ByteOrder.LITTLE_ENDIAN);
            if (h.getInt(0) != 0x4D524252) {
                throw new IOException("not a memserver reply");
            }
            int length = h.getInt(20);
            if (length < 0 || length > (17 << 20)) {
                throw new IOException("reply of " + length + " bytes");
            }
            byte[] body = new byte[length];
            in.readFully(body);
            return new Reply(h.getInt(16), ByteBuffer.wrap(body).order(ByteOrder.LITTLE_ENDIAN));
        }

        /** True if the memserver closed the connection within {@code millis} (reading and dropping what it sent). */
        boolean closedByServer(int millis) throws IOException {
            socket.setSoTimeout(millis);
            try {
                while (in.read() >= 0) {
                    // an error reply before the close
                }
                return true;
            } catch (SocketTimeoutException e) {
                return false;
            } catch (SocketException e) {
                return true; // reset
            } finally {
                socket.setSoTimeout(10_000);
            }
        }

        @Override
        public void close() {
            try {
                socket.close();
            } catch (IOException e) {
                // closing is all that is left to do
            }
        }
    }
}
