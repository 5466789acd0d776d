package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteListener;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The congestion control each end of a tcp-provider connection asks for, as the kernel reports it to iproute2's
 * {@code ss}: the listener's choice on its accepted sockets ({@link ListenParams#tcpCongestion}), the client's on its own, the host default where asked
 * for or where the choice is refused (the connection still works).
 */
@Timeout(60)
class TcpCongestionChoiceTest {
    static final String TOKEN = "cc";
    RemoteListener memserver;

    @BeforeEach
    void start() throws IOException {
        memserver = new TcpProvider().listen(new ListenParams().address(new InetSocketAddress("127.0.0.1", 0))
                .tcpCongestion("reno"), new ArenaRegionServiceForTests(TOKEN));
    }

    @AfterEach
    void stop() {
        memserver.close();
    }

    RemoteConnection connect(String algorithm) throws Exception {
        return new TcpProvider().connect(new ConnectParams().address(memserver.address()).token(TOKEN)
                .clientName("cc-test").tcpCongestion(algorithm).operationTimeout(Duration.ofSeconds(5)));
    }

    static String hostDefault() throws IOException {
        return Files.readString(Path.of("/proc/sys/net/ipv4/tcp_congestion_control")).strip();
    }

    /** The algorithm ss reports for each established socket matching {@code filter}. */
    static List<String> algorithms(String filter) throws IOException, InterruptedException {
        Process ss = new ProcessBuilder("ss", "-tinH", "state", "established", filter).redirectErrorStream(true)
                .start();
        String out = new String(ss.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, ss.waitFor(), "ss failed: " + out);
        List<String> found = new ArrayList<>();
        for (String line : out.split("\n")) {
            if (line.startsWith("\t") || line.startsWith(" ")) { // the info line under each socket
                found.add(line.strip().split("\\s+")[0]);
            }
        }
        return found;
    }

    /** Writes and reads back a block, so the connection is seen working. */
    static void roundTrip(RemoteConnection c) throws Exception {
        RegionDescriptor r = c.allocate(RegionTag.scratch("cc"), 1 << 20).get(10, TimeUnit.SECONDS);
        try (Arena arena = Arena.ofShared()) {
            MemorySegment out = arena.allocate(65536).fill((byte) 7);
            MemorySegment in = arena.allocate(65536);
            c.write(r, 4096, out).get(10, TimeUnit.SECONDS);
            c.read(r, 4096, in).get(10, TimeUnit.SECONDS);
            assertEquals(-1, out.mismatch(in));
        }
        c.release(r).get(10, TimeUnit.SECONDS);
    }

    @Test
    void eachEndRunsItsOwnChoice() throws Exception {
        int port = memserver.address().getPort();
        try (RemoteConnection c = connect("cubic")) {
            roundTrip(c);
            assertEquals(List.of("cubic"), algorithms("( dport = :" + port + " )"), "the client's socket");
            assertEquals(List.of("reno"), algorithms("( sport = :" + port + " )"), "the memserver's socket");
        }
    }

    @Test
    void systemKeepsTheHostDefault() throws Exception {
        try (RemoteConnection c = connect("system")) {
            roundTrip(c);
            assertEquals(List.of(hostDefault()), algorithms("( dport = :" + memserver.address().getPort() + " )"));
        }
    }

    @Test
    void aChoiceTheKernelRefusesKeepsTheHostDefaultAndTheConnection() throws Exception {
        try (RemoteConnection c = connect("nosuchcc")) {
            roundTrip(c);
            assertEquals(List.of(hostDefault()), algorithms("( dport = :" + memserver.address().getPort() + " )"));
        }
    }
}
