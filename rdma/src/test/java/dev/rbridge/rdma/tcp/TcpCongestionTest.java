package dev.rbridge.rdma.tcp;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Choosing a socket's congestion control through setsockopt on a real loopback connection. */
@Timeout(30)
class TcpCongestionTest {
    LoopbackPair pair;

    @BeforeEach
    void connect() throws IOException {
        pair = new LoopbackPair();
    }

    @AfterEach
    void close() throws IOException {
        pair.close();
    }

    static String hostDefault() throws IOException {
        return Files.readString(Path.of("/proc/sys/net/ipv4/tcp_congestion_control")).strip();
    }

    @Test
    void eachEndRunsWhatWasSetOnItAndOnlyThat() throws IOException {
        TcpCongestion.set(pair.client, "reno");
        assertEquals("reno", TcpCongestion.get(pair.client));
        assertEquals(hostDefault(), TcpCongestion.get(pair.accepted), "the other end of the connection is untouched");
        TcpCongestion.set(pair.accepted, "cubic");
        assertEquals("cubic", TcpCongestion.get(pair.accepted));
        assertEquals("reno", TcpCongestion.get(pair.client));
    }

    @Test
    void anAlgorithmTheKernelLacksIsRefusedWithWhereToLook() {
        IOException e = assertThrows(IOException.class, () -> TcpCongestion.set(pair.client, "nosuchcc"));
        assertTrue(e.getMessage().contains("tcp_available_congestion_control"), e.getMessage());
    }

    @Test
    void aRefusedChoiceLeavesTheSocketWorkingUnderTheHostDefault() throws IOException {
        TcpCongestion.apply(pair.client, "nosuchcc");
        assertEquals(hostDefault(), TcpCongestion.get(pair.client));
        TcpCongestion.apply(pair.client, "system");
        assertEquals(hostDefault(), TcpCongestion.get(pair.client));
        pair.client.write(ByteBuffer.wrap(new byte[]{42}));
        ByteBuffer b = ByteBuffer.allocate(1);
        pair.accepted.read(b);
        assertEquals(42, b.get(0));
    }

    @Test
    void anUnconnectedSocketIsRefusedRatherThanGuessedAt() throws IOException {
        try (SocketChannel loose = SocketChannel.open()) {
            IOException e = assertThrows(IOException.class, () -> TcpCongestion.set(loose, "reno"));
            assertTrue(e.getMessage().contains("not connected"), e.getMessage());
        }
    }
}
