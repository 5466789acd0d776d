package dev.rbridge.rdma.tcp;

import dev.rbridge.common.splice.Pipe;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * READ data spliced from a lane's socket into a pipe, against a real tcp listener: the pipe then holds the first
 * bytes and the destination the rest, with every byte where it belongs, whoever reads replies; a pipe too small for
 * the data takes what it can; a reply that stops halfway fails at the timeout instead of leaving the splice waiting.
 */
@Timeout(120)
class TcpSplicedReadTest {
    static final String TOKEN = "spliced";
    static final Duration OP_TIMEOUT = Duration.ofSeconds(1);
    @RegisterExtension
    static final LoopbackTcpListener memserver = new LoopbackTcpListener(TOKEN);

    RemoteConnection connect(InetSocketAddress address, boolean callerDriven) throws RemoteMemoryException {
        return new TcpProvider().connect(new ConnectParams().address(address).token(TOKEN).clientName("spliced")
                .callerDriven(callerDriven).operationTimeout(OP_TIMEOUT).lanes(1));
    }

    /** Everything {@code pipe} holds, taken out through a loopback socket pair. */
    static byte[] drain(Pipe pipe) throws Exception {
        int n = (int) pipe.held();
        try (ServerSocketChannel server = ServerSocketChannel.open()) {
            server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            try (SocketChannel out = SocketChannel.open(server.getLocalAddress()); SocketChannel in = server.accept();
                    dev.rbridge.common.splice.SocketDescriptor d = dev.rbridge.common.splice.SocketDescriptor.of(out)) {
                ByteBuffer got = ByteBuffer.allocate(n);
                CompletableFuture<Void> reader = CompletableFuture.runAsync(() -> {
                    try {
                        while (got.hasRemaining() && in.read(got) >= 0) {
                            Thread.onSpinWait();
                        }
                    } catch (IOException e) {
                        throw new RuntimeException(e);
                    }
                });
                assertTrue(d.enter());
                try {
                    while (pipe.held() > 0) {
                        pipe.spliceTo(d.fd(), Integer.MAX_VALUE, false);
                    }
                } finally {
                    d.exit();
                }
                reader.get(30, TimeUnit.SECONDS);
                return got.array();
            }
        }
    }

    @ParameterizedTest(name = "callerDriven={0}")
    @ValueSource(booleans = {false, true})
    void theFirstBytesComeInThePipeAndTheRestInMemoryEachWhereItBelongs(boolean callerDriven) throws Exception {
        try (RemoteConnection c = connect(memserver.address(), callerDriven); Arena arena = Arena.ofShared()) {
            int size = 1 << 20;
            RegionDescriptor r = c.allocate(RegionTag.scratch("spliced"), 8L * size).get(10, TimeUnit.SECONDS);
            byte[] data = new byte[4 * size];
            new Random(5).nextBytes(data);
            MemorySegment src = arena.allocate(data.length);
            MemorySegment.copy(data, 0, src, ValueLayout.JAVA_BYTE, 0, data.length);
            c.write(r, 0, src).get(10, TimeUnit.SECONDS);

            // A small read first, so that the next reply's start may already sit in the reader's buffer.
            c.read(r, 0, arena.allocate(4096)).get(10, TimeUnit.SECONDS);
            int[] pipeSizes = {size, 4096}; // one that holds it all, one of a single slot
            for (int round = 0; round < 6; round++) {
                int pipeSize = pipeSizes[round % 2];
                long offset = 4096L * round * 7;
                MemorySegment dst = arena.allocate(size);
                try (Pipe pipe = Pipe.open(pipeSize)) {
                    int piped = c.readSpliced(r, offset, dst, pipe).get(10, TimeUnit.SECONDS);
                    assertEquals(piped, pipe.held(), "the pipe holds what was reported");
                    assertTrue(piped > 0, "a plain link splices");
                    // A pipe's slots hold socket buffers by reference, several pages each on loopback, so a pipe
                    // takes more than its nominal size; the rest of what it cannot take is in memory.
                    assertTrue(piped <= size, piped + " of " + size);
                    if (pipeSize == 4096) {
                        assertTrue(piped < size, "one slot cannot take a MiB: the rest must be in memory");
                    }
                    byte[] expected = Arrays.copyOfRange(data, (int) offset, (int) offset + size);
                    byte[] got = new byte[size];
                    System.arraycopy(drain(pipe), 0, got, 0, piped);
                    MemorySegment.copy(dst, ValueLayout.JAVA_BYTE, piped, got, piped, size - piped);
                    assertArrayEquals(expected, got, "round " + round + ", " + piped + " bytes piped");
                }
            }
            // Plain reads on the same lane afterwards are whole.
            MemorySegment back = arena.allocate(size);
            c.read(r, size, back).get(10, TimeUnit.SECONDS);
            assertArrayEquals(Arrays.copyOfRange(data, size, 2 * size), back.toArray(ValueLayout.JAVA_BYTE));
        }
    }

    @ParameterizedTest(name = "callerDriven={0}")
    @ValueSource(booleans = {false, true})
    void aSplicedReplyThatStopsHalfwayFailsWithinTheTimeout(boolean callerDriven) throws Exception {
        try (FreezingRelay relay = new FreezingRelay(memserver.address());
                RemoteConnection c = connect(relay.address(), callerDriven);
                Arena arena = Arena.ofShared(); Pipe pipe = Pipe.open(1 << 20)) {
            int size = 1 << 20;
            RegionDescriptor r = c.allocate(RegionTag.scratch("halfway"), size).get(10, TimeUnit.SECONDS);
            c.write(r, 0, arena.allocate(size).fill((byte) 0x5a)).get(10, TimeUnit.SECONDS);

            relay.passDown(300 << 10); // the reply's header and some of its data, then nothing
            CompletableFuture<Integer> read = c.readSpliced(r, 0, arena.allocate(size), pipe);
            ExecutionException e = assertTimeoutPreemptively(OP_TIMEOUT.multipliedBy(8),
                    () -> assertThrows(ExecutionException.class, () -> read.get(30, TimeUnit.SECONDS)),
                    "a spliced reply that stopped halfway must fail at the timeout, not leave the splice waiting");
            RemoteMemoryException cause = assertInstanceOf(RemoteMemoryException.class, e.getCause());
            assertEquals(Status.TIMEOUT, cause.status(), cause.getMessage());
        }
    }
}
