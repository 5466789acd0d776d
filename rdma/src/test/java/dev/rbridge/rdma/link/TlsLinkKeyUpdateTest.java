package dev.rbridge.rdma.link;

import dev.rbridge.common.tls.TestCertificates;
import dev.rbridge.common.tls.X509Credentials;
import dev.rbridge.rdma.ChildJvm;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import javax.net.ssl.SSLContext;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.Security;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * TLS 1.3 key updates under load never stall a connection. The model is the tcp provider's shape: a client with a
 * reply reader and a pipelining writer, a memserver thread that reads a request and writes a large reply. The key
 * limit is lowered (a child JVM: JSSE reads it once) so key updates come every 16 KiB of records instead of every
 * 2^37 bytes. The reader used to answer a key update with a blocking send of its own; with the send buffer full the
 * reader stopped reading replies, the memserver stopped reading requests, and nothing moved again.
 */
@Tag("fault")
@Timeout(120)
class TlsLinkKeyUpdateTest {
    @TempDir
    Path dir;

    @Test
    void keyUpdatesUnderPipelinedLoadNeverStallTheConnection() throws Exception {
        Path log = dir.resolve("model.log");
        Process p = new ProcessBuilder(ChildJvm.command(List.of(), Model.class, List.of(dir.toString(), "14", "12")))
                .redirectErrorStream(true).redirectOutput(log.toFile()).start();
        assertTrue(p.waitFor(100, TimeUnit.SECONDS), "the model did not end:\n" + Files.readString(log));
        assertEquals(0, p.exitValue(), Files.readString(log));
        assertTrue(Files.readString(log).contains("key updates answered"), Files.readString(log));
    }

    /** Runs the load for the given seconds; exits 1 when no reply byte moved for 5 s. */
    public static final class Model {
        public static void main(String[] args) throws Exception {
            Path dir = Path.of(args[0]);
            Security.setProperty("jdk.tls.keyLimits", "AES/GCM/NoPadding KeyUpdate 2^" + args[1]
                    + ", ChaCha20-Poly1305 KeyUpdate 2^" + args[1]);
            int seconds = Integer.parseInt(args[2]);
            TestCertificates ca = TestCertificates.authority("key update CA");
            SSLContext serverContext = X509Credentials.serverContext(ca.server(dir.resolve("s")), false);
            SSLContext clientContext = X509Credentials.clientContext(ca.caOnly(dir.resolve("c")));
            ServerSocketChannel ss = ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0));
            InetSocketAddress address = (InetSocketAddress) ss.getLocalAddress();
            CompletableFuture<TlsLink> accepted = CompletableFuture.supplyAsync(() -> {
                try {
                    SocketChannel ch = ss.accept();
                    ch.setOption(StandardSocketOptions.SO_SNDBUF, 256 << 10);
                    ch.setOption(StandardSocketOptions.SO_RCVBUF, 256 << 10);
                    return TlsLink.server(ch, serverContext, false);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            SocketChannel ch = SocketChannel.open();
            ch.setOption(StandardSocketOptions.SO_SNDBUF, 256 << 10);
            ch.setOption(StandardSocketOptions.SO_RCVBUF, 256 << 10);
            ch.connect(address);
            TlsLink client = TlsLink.client(ch, clientContext, address);
            TlsLink server = accepted.get();
            AtomicLong replyBytes = new AtomicLong();
            start("memserver", () -> {
                ByteBuffer request = ByteBuffer.allocate(256 << 10);
                ByteBuffer reply = ByteBuffer.allocate(1 << 20);
                while (true) {
                    request.clear();
                    while (request.hasRemaining()) {
                        if (server.read(request) < 0) {
                            return;
                        }
                    }
                    reply.clear();
                    while (reply.hasRemaining()) {
                        server.write(reply);
                    }
                }
            });
            start("client-reader", () -> {
                ByteBuffer in = ByteBuffer.allocate(64 << 10);
                while (true) {
                    int n = client.read(in.clear());
                    if (n < 0) {
                        return;
                    }
                    replyBytes.addAndGet(n);
                }
            });
            start("client-writer", () -> {
                ByteBuffer request = ByteBuffer.allocate(256 << 10);
                for (long i = 1;; i++) {
                    client.write(request.clear());
                    if (i % 32 == 0) {
                        Thread.sleep(5); // a flusher whose queue ran empty: the write lock is free now and then
                    }
                }
            });
            long last = -1;
            int still = 0;
            for (int s = 0; s < seconds; s++) {
                Thread.sleep(1000);
                long now = replyBytes.get();
                System.out.println("t=" + (s + 1) + " s: " + (now >> 20) + " MiB of replies");
                still = now == last ? still + 1 : 0;
                if (still == 5) {
                    System.out.println("no reply byte moved for 5 s: the connection stalled");
                    Thread.getAllStackTraces().forEach((t, st) -> {
                        if (t.getName().startsWith("client") || t.getName().equals("memserver")) {
                            System.out.println(t.getName() + ": " + List.of(st).subList(0, Math.min(8, st.length)));
                        }
                    });
                    System.exit(1);
                }
                last = now;
            }
            System.out.println("key updates answered: " + (last >> 20) + " MiB moved without a stall");
            System.exit(0);
        }

        private interface Body {
            void run() throws Exception;
        }

        private static void start(String name, Body body) {
            Thread t = new Thread(() -> {
                try {
                    body.run();
                } catch (Exception e) {
                    System.out.println(name + ": " + e);
                }
            }, name);
            t.setDaemon(true);
            t.start();
        }
    }
}
