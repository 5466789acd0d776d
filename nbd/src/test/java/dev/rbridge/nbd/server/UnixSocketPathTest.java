package dev.rbridge.nbd.server;

import dev.rbridge.nbd.device.SparseMemoryDevice;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What {@code --unix PATH} does with what it finds at PATH: a socket file a dead server left is replaced, a live
 * server's socket is an error, and anything that is not a socket (a regular file, a directory, a symbolic link) is left
 * alone and refused in one line (a regular file there was deleted).
 */
@Timeout(60)
class UnixSocketPathTest {
    private static NbdServer start(Path socket) throws IOException {
        return NbdServer.start(NbdServerConfig.builder().listen(new ListenAddress.Unix(socket))
                .drainTimeout(Duration.ofSeconds(1)).export(Export.of("disk", new SparseMemoryDevice(1 << 20)))
                .build());
    }

    private static void assertRefusedInOneLine(Path path, String... words) {
        IOException e = assertThrows(IOException.class, () -> start(path).close());
        String m = e.getMessage();
        assertFalse(m.contains("\n"), m);
        for (String w : words) {
            assertTrue(m.contains(w), "'" + w + "' missing: " + m);
        }
    }

    @Test
    void aRegularFileSurvivesAndTheServerRefusesInOneLine() throws Exception {
        Path dir = Files.createTempDirectory("unix-path");
        Path file = Files.writeString(dir.resolve("nbd.sock"), "precious data\n");
        assertRefusedInOneLine(file, file.toString(), "not a socket", "--unix");
        assertTrue(Files.isRegularFile(file), "the regular file at --unix's path was deleted");
        assertEquals("precious data\n", Files.readString(file));
    }

    @Test
    void aDirectoryAndASymbolicLinkSurvive() throws Exception {
        Path dir = Files.createTempDirectory("unix-path");
        Path sub = Files.createDirectory(dir.resolve("nbd.sock"));
        assertRefusedInOneLine(sub, "not a socket");
        assertTrue(Files.isDirectory(sub));
        Path target = Files.writeString(dir.resolve("target"), "x");
        Path link = Files.createSymbolicLink(dir.resolve("link.sock"), target);
        assertRefusedInOneLine(link, "not a socket");
        assertTrue(Files.isSymbolicLink(link) && Files.isRegularFile(target));
    }

    @Test
    void aStaleSocketIsReplacedAndALiveOneRefused() throws Exception {
        Path dir = Files.createTempDirectory("unix-path");
        Path socket = dir.resolve("nbd.sock");
        try (ServerSocketChannel dead = ServerSocketChannel.open(StandardProtocolFamily.UNIX)) {
            dead.bind(UnixDomainSocketAddress.of(socket)); // closed below without removing its file: stale
        }
        assertTrue(Files.exists(socket), "the stale socket file");
        try (NbdServer s = start(socket)) {
            try (SocketChannel c = SocketChannel.open(UnixDomainSocketAddress.of(socket))) {
                assertTrue(c.isConnected(), "the new server answers on the replaced socket");
            }
            assertRefusedInOneLine(socket, "already listening");
        }
    }
}
