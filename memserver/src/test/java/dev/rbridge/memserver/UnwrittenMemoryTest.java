package dev.rbridge.memserver;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.local.LocalProvider;
import dev.rbridge.rdma.tcp.TcpProvider;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Reading memory nobody wrote costs the memserver nothing, whatever the kernel does on a read fault (some back the
 * page): a fresh region read end to end stays unbacked, written bytes come back among zeroes, and ZERO forgets what it
 * zeroes. Memserver in this JVM, so its resident bytes can be read; over the tcp and the in-process provider.
 */
@Timeout(60)
class UnwrittenMemoryTest {
    static final String TOKEN = "unwritten";
    static final long REGION = 64L << 20;
    static final long PAGE = 4096;

    @ParameterizedTest
    @ValueSource(strings = {"tcp", "local"})
    void readingNeverWrittenMemorySendsZeroesAndBacksNothing(String transport) throws Exception {
        try (Memserver memserver = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0),
                256L << 20, TOKEN, transport));
                RemoteConnection c = provider(transport).connect(new ConnectParams().address(memserver.address())
                        .token(TOKEN).clientName("unwritten").operationTimeout(Duration.ofSeconds(5)));
                Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("unwritten"), REGION).get(10, TimeUnit.SECONDS);
            // 6000 bytes from 100 bytes before the page boundary at 1 MiB: three pages touched, none whole.
            long at = (1L << 20) - 100;
            MemorySegment data = arena.allocate(6000).fill((byte) 0x5A);
            c.write(r, at, data).get(10, TimeUnit.SECONDS);

            MemorySegment whole = arena.allocate(REGION);
            for (long off = 0; off < REGION; off += 16L << 20) {
                whole.asSlice(off, 16L << 20).fill((byte) 0x77); // so that zeroes must really have been sent
                c.read(r, off, whole.asSlice(off, 16L << 20)).get(10, TimeUnit.SECONDS);
            }
            assertRange(whole, 0, at, (byte) 0);
            assertRange(whole, at, 6000, (byte) 0x5A);
            assertRange(whole, at + 6000, REGION - at - 6000, (byte) 0);
            long resident = memserver.stats().residentBytes();
            assertTrue(resident <= 3 * PAGE, "reading 64 MiB that was never written backed " + resident
                    + " bytes; only the three pages written should be");

            // A read that starts and ends inside written pages, with unwritten pages around them.
            MemorySegment mixed = arena.allocate(5 * PAGE).fill((byte) 0x77);
            c.read(r, (1L << 20) - 2 * PAGE - 1, mixed).get(10, TimeUnit.SECONDS);
            for (long i = 0; i < mixed.byteSize(); i++) {
                long abs = (1L << 20) - 2 * PAGE - 1 + i;
                byte expected = abs >= at && abs < at + 6000 ? (byte) 0x5A : 0;
                assertEquals(expected, mixed.get(ValueLayout.JAVA_BYTE, i), "byte " + abs);
            }

            // ZERO over the first written page and part of the second: the whole page goes back, the part is
            // zeroed in place, and the rest of the data survives.
            c.zero(r, (1L << 20) - PAGE, PAGE + 1000).get(10, TimeUnit.SECONDS);
            MemorySegment after = arena.allocate(3 * PAGE).fill((byte) 0x77);
            c.read(r, (1L << 20) - PAGE, after).get(10, TimeUnit.SECONDS);
            assertRange(after, 0, PAGE + 1000, (byte) 0);
            assertRange(after, PAGE + 1000, at + 6000 - (1L << 20) - 1000, (byte) 0x5A);
            assertRange(after, PAGE + at + 6000 - (1L << 20), 3 * PAGE - (PAGE + at + 6000 - (1L << 20)), (byte) 0);
            // Zeroing memory never written does not back it either.
            c.zero(r, 8L << 20, 100).get(10, TimeUnit.SECONDS);
            c.zero(r, (16L << 20) + 10, 3 * PAGE).get(10, TimeUnit.SECONDS);
            resident = memserver.stats().residentBytes();
            assertTrue(resident <= 2 * PAGE, "after the zeroes " + resident + " bytes are backed");
        }
    }

    private static RemoteMemoryProvider provider(String transport) {
        return transport.equals("local") ? new LocalProvider() : new TcpProvider();
    }

    private static void assertRange(MemorySegment s, long from, long length, byte expected) {
        for (long i = from; i < from + length; i++) {
            if (s.get(ValueLayout.JAVA_BYTE, i) != expected) {
                throw new AssertionError("byte " + i + " is " + s.get(ValueLayout.JAVA_BYTE, i) + ", expected "
                        + expected + " (checking " + from + "+" + length + ")");
            }
        }
    }
}
