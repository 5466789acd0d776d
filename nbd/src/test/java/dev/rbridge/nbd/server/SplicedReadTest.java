package dev.rbridge.nbd.server;

import dev.rbridge.nbd.protocol.Nbd;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.Random;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * READ replies whose data comes partly from a pipe (spliced into the socket) and partly from memory: every byte in
 * order, in simple and structured replies, pipelined with small unspliced reads; and a client that stops reading such
 * replies is cut off at the reply timeout with every pipe closed and its memory back in the budget.
 */
@Timeout(120)
class SplicedReadTest {
    private static final int MiB = 1 << 20;

    private static TestServer server(SplicingMemoryDevice device, ServerLimitsTest.Recorder metrics,
            Duration replyTimeout) throws IOException {
        return TestServer
                .start(b -> b.export(Export.of("spliced", device)).metrics(metrics).replyTimeout(replyTimeout));
    }

    /** Pipes this process holds open (each is two descriptors). */
    private static long openPipeEnds() throws IOException {
        try (Stream<Path> fds = Files.list(Path.of("/proc/self/fd"))) {
            return fds.filter(p -> {
                try {
                    return Files.readSymbolicLink(p).toString().startsWith("pipe:");
                } catch (IOException e) {
                    return false; // closed meanwhile
                }
            }).count();
        }
    }

    @ParameterizedTest(name = "structured={0}")
    @ValueSource(booleans = {false, true})
    void everyByteArrivesInOrderWhetherPipedOrCopied(boolean structured) throws Exception {
        SplicingMemoryDevice device = new SplicingMemoryDevice(64 * MiB);
        byte[] data = new byte[8 * MiB];
        new Random(11).nextBytes(data);
        try (TestServer ts = server(device, new ServerLimitsTest.Recorder(), Duration.ofSeconds(30));
                RawClient c = RawClient.connect(ts.server)) {
            c.go("spliced", structured, false);
            c.request(0, Nbd.CMD_WRITE, 1, 0, data.length, data);
            c.flush();
            assertEquals(0, c.readSimple(0).error(), "a WRITE is answered with a simple reply either way");
            // Pipelined: spliced reads of several sizes between reads too small to splice.
            int[] lengths = {MiB, 4096, 256 << 10, 64 << 10, 512, 3 * MiB, (64 << 10) - 512, MiB};
            long[] offsets = new long[lengths.length];
            for (int i = 0; i < lengths.length; i++) {
                offsets[i] = (i * 777L * 512) % (data.length - lengths[i]);
                c.request(0, Nbd.CMD_READ, 100 + i, offsets[i], lengths[i], null);
            }
            c.flush();
            for (int i = 0; i < lengths.length; i++) {
                byte[] got;
                long handle;
                if (structured) {
                    RawClient.Chunk chunk = c.readChunk();
                    assertEquals(Nbd.REPLY_TYPE_OFFSET_DATA, chunk.type());
                    handle = chunk.handle();
                    got = Arrays.copyOfRange(chunk.payload(), 8, chunk.payload().length);
                } else {
                    int[] byHandle = lengths;
                    RawClient.SimpleReply r = c.readSimple(h -> byHandle[(int) h - 100]);
                    assertEquals(0, r.error());
                    handle = r.handle();
                    got = r.data();
                }
                int k = (int) handle - 100;
                assertArrayEquals(Arrays.copyOfRange(data, (int) offsets[k], (int) offsets[k] + lengths[k]), got,
                        "read " + k + " of " + lengths[k] + " bytes");
            }
            // 1 MiB twice, 256 KiB, 64 KiB and 3 MiB (above the kernel's largest pipe unless root raised it) or not
            assertTrue(device.spliced.get() >= 4, device.spliced.get() + " reads spliced");
        }
    }

    @Test
    void aClientThatStopsReadingSplicedRepliesIsCutOffAndEveryPipeAndByteComesBack() throws Exception {
        SplicingMemoryDevice device = new SplicingMemoryDevice(64 * MiB);
        ServerLimitsTest.Recorder m = new ServerLimitsTest.Recorder();
        try (TestServer ts = server(device, m, Duration.ofMillis(500))) {
            long pipesBefore = openPipeEnds();
            try (RawClient stuck = RawClient.connect(ts.server)) {
                stuck.go("spliced", true, false);
                for (int i = 0; i < 64; i++) {
                    stuck.request(0, Nbd.CMD_READ, i, (long) (i % 32) * MiB, MiB, null);
                }
                stuck.flush();
                ServerLimitsTest.await("the unread replies' connection to close",
                        () -> m.closed("reply_timeout") == 1);
                ServerLimitsTest.await("its buffers and pipes to come back",
                        () -> ts.server.state().payloadUsedBytes() == 0);
                assertTrue(device.spliced.get() > 0, "the replies were spliced");
                ServerLimitsTest.await("its pipes to close", () -> {
                    try {
                        return openPipeEnds() <= pipesBefore;
                    } catch (IOException e) {
                        throw new RuntimeException(e);
                    }
                });
            }
        }
    }
}
