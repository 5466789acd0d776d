package dev.rbridge.cli.history;

import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link LibnbdTarget} when the server does not answer: a request fails once its deadline passes (the libnbd child is
 * killed), and the next one connects anew. The success path is {@link VersionedWorkloadInteropTest}.
 */
@Timeout(60)
@Tag("interop")
class LibnbdTargetTest {
    @BeforeAll
    static void libnbd() {
        PeerTool.check(30, "/usr/bin/python3", "-I", "-c", "import nbd");
    }

    @Test
    void aSilentServerCostsOneDeadlinePerRequestAndEachRequestConnectsAgain() throws Exception {
        List<Socket> accepted = new CopyOnWriteArrayList<>();
        try (ServerSocket silent = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            Thread acceptor = Thread.ofPlatform().daemon().start(() -> {
                try {
                    while (true) {
                        accepted.add(silent.accept()); // accepted, never answered: the handshake hangs
                    }
                } catch (IOException closed) {
                    // the test is over
                }
            });
            Duration deadline = Duration.ofMillis(1500);
            try (BlockTarget target = LibnbdTarget.connector("nbd://127.0.0.1:" + silent.getLocalPort() + "/x",
                    deadline).connect()) {
                for (int i = 1; i <= 2; i++) {
                    long start = System.nanoTime();
                    IOException e = assertThrows(IOException.class, () -> target.write(0, new byte[4096]));
                    long ms = (System.nanoTime() - start) / 1_000_000;
                    assertTrue(e.getMessage().startsWith("no answer within 1500 ms"), e.toString());
                    assertTrue(ms >= 1500 && ms < 10_000, "failed after " + ms + " ms");
                    assertEquals(i, accepted.size(), "request " + i + " connects anew");
                }
            } finally {
                silent.close();
                acceptor.join(5_000);
                for (Socket s : accepted) {
                    s.close();
                }
            }
        }
    }

    @Test
    void noServerFailsAtOnceWithLibnbdsMessage() throws Exception {
        int port;
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            port = s.getLocalPort(); // closed again: nothing listens there
        }
        try (BlockTarget target = LibnbdTarget.connector("nbd://127.0.0.1:" + port + "/x",
                Duration.ofSeconds(20)).connect()) {
            long start = System.nanoTime();
            IOException e = assertThrows(IOException.class, () -> target.read(0, 4096));
            assertTrue(e.getMessage().startsWith("connect: "), e.toString());
            assertTrue(System.nanoTime() - start < Duration.ofSeconds(15).toNanos(), "took the whole deadline");
        }
    }
}
