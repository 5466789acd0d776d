package dev.rbridge.memserver;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ConnectionLimits;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageDecoder;
import dev.rbridge.rdma.wire.MessageEncoder;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Fencing at one memserver, by real clients over tcp: what a previous holder of a volume, or a client that got a key
 * while the lease bound nobody, can still do once another grant is made. Each case was seen to put bytes into a
 * volume another client owned (or to hold memory past the capacity) before epochs and drained takeovers.
 */
@Timeout(60)
class FencingTest {
    static final String TOKEN = MemserverFloodTest.TOKEN;
    static final int MIB = 1 << 20;

    static Memserver start(long capacity) throws Exception {
        return Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), capacity, TOKEN, "tcp",
                false, false, ConnectParams.TCP_CONGESTION_DEFAULT, ConnectionLimits.DEFAULTS,
                MemserverConfig.MAX_REGIONS_DEFAULT), Duration.ofSeconds(20));
    }

    static RemoteConnection connect(Memserver m, String name) throws RemoteMemoryException {
        return MemserverLimitsTest.connect(m, name);
    }

    /** The first live lease of {@code volume} as the memserver lists it has lapsed. */
    static boolean lapsed(Memserver m, String volume) {
        return m.leases().stream().anyMatch(l -> l.volume().equals(volume) && l.state().equals("expired"));
    }

    static void await(BooleanSupplier condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "timed out waiting until " + what);
            Thread.sleep(10);
        }
    }

    static byte[] pattern(char c, int n) {
        byte[] b = new byte[n];
        Arrays.fill(b, (byte) c);
        return b;
    }

    static byte[] read(RemoteConnection c, RegionDescriptor r, int n) throws Exception {
        try (Arena arena = Arena.ofShared()) {
            MemorySegment dst = arena.allocate(n);
            c.read(r, 0, dst).get(10, TimeUnit.SECONDS);
            return dst.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
        }
    }

    static void write(RemoteConnection c, RegionDescriptor r, byte[] data) throws Exception {
        try (Arena arena = Arena.ofShared()) {
            MemorySegment src = arena.allocate(data.length);
            src.copyFrom(MemorySegment.ofArray(data));
            c.write(r, 0, src).get(10, TimeUnit.SECONDS);
        }
    }

    /** Which bytes a range holds, for a readable failure: "1048576 x 'B'", or the runs. */
    static String describe(byte[] b) {
        StringBuilder out = new StringBuilder();
        int i = 0;
        while (i < b.length && out.length() < 200) {
            int j = i;
            while (j < b.length && b[j] == b[i]) {
                j++;
            }
            out.append(out.isEmpty() ? "" : ", ").append(j - i).append(" x '").append((char) b[i]).append("'");
            i = j;
        }
        return out.toString();
    }

    /**
     * A client of the memserver protocol written by hand, so that it can stop in the middle of a WRITE's data as a
     * paused or cut-off bridge does.
     */
    static final class RawClient implements AutoCloseable {
        final SocketChannel ch;
        final MessageDecoder decoder = MessageDecoder.forClient();
        final ByteBuffer in = ByteBuffer.allocate(1 << 16).order(ByteOrder.LITTLE_ENDIAN).flip();
        long nextId = 1;

        RawClient(Memserver m) throws IOException {
            ch = SocketChannel.open(m.address());
            send(new Message.Hello(nextId++, TOKEN, "raw"));
            assertTrue(reply() instanceof Message.HelloReply);
        }

        void send(Message m) throws IOException {
            ByteBuffer b = MessageEncoder.encode(m);
            while (b.hasRemaining()) {
                ch.write(b);
            }
        }

        void sendData(byte[] data) throws IOException {
            ByteBuffer b = ByteBuffer.wrap(data);
            while (b.hasRemaining()) {
                ch.write(b);
            }
        }

        Message reply() throws IOException {
            while (true) {
                Message m;
                try {
                    m = decoder.next(in);
                } catch (dev.rbridge.rdma.wire.MalformedMessageException e) {
                    throw new IOException(e);
                }
                if (m != null) {
                    return m;
                }
                in.compact();
                int n = ch.read(in);
                in.flip();
                if (n < 0) {
                    throw new IOException("the memserver closed the connection");
                }
            }
        }

        @Override
        public void close() throws IOException {
            ch.close();
        }
    }

    @Test
    void aWriteStalledAcrossATakeoverNeverLandsAfterIt() throws Exception {
        try (Memserver m = start(256L << 20); RawClient a = new RawClient(m)) {
            a.send(new Message.Lease(a.nextId++, "vol", "bridge-a", 300));
            assertTrue(a.reply() instanceof Message.LeaseReply);
            a.send(new Message.Allocate(a.nextId++, MIB, new RegionTag("vol", 0, 0, 1)));
            RegionDescriptor region = ((Message.AllocateReply) a.reply()).region();
            // The header and 64 KiB of a 1 MiB WRITE, then nothing: a bridge paused in the middle of its payload.
            a.send(new Message.Write(a.nextId++, region.id(), region.key(), 0, MIB));
            a.sendData(pattern('A', 64 << 10));
            await(() -> lapsed(m, "vol"), "bridge A's lease lapsed");

            try (RemoteConnection b = connect(m, "bridge-b")) {
                Lease taken = b.lease("vol", "bridge-b", Duration.ofSeconds(30)).get(20, TimeUnit.SECONDS);
                assertTrue(taken.tookOver());
                RegionDescriptor mine = b.open(region.id()).get(5, TimeUnit.SECONDS);
                write(b, mine, pattern('B', MIB));
                assertEquals(describe(pattern('B', MIB)), describe(read(b, mine, MIB)));

                // A wakes up and sends the rest of its data: the memserver must not take it into region memory.
                boolean answered;
                try {
                    a.sendData(pattern('A', MIB - (64 << 10)));
                    Message reply = a.reply();
                    answered = !(reply instanceof Message.Error);
                } catch (IOException cutOff) {
                    answered = false; // the takeover disconnected it
                }
                assertFalse(answered, "the fenced writer's WRITE was acknowledged");
                assertEquals(describe(pattern('B', MIB)), describe(read(b, mine, MIB)),
                        "the new holder's data was overwritten by the fenced writer's stalled payload");
            }
        }
    }

    @Test
    void aKeyHandedOutWhileTheLeaseLapsedStopsWorkingWhenItsHolderRenews() throws Exception {
        try (Memserver m = start(256L << 20); RemoteConnection holder = connect(m, "holder");
                RemoteConnection intruder = connect(m, "intruder")) {
            Lease first = holder.lease("vol", "holder", Duration.ofMillis(300)).get(5, TimeUnit.SECONDS);
            RegionDescriptor region = holder.allocate(new RegionTag("vol", 0, 0, 1), MIB).get(5, TimeUnit.SECONDS);
            await(() -> lapsed(m, "vol"), "the holder's lease lapsed");
            RegionDescriptor stolen = intruder.open(region.id()).get(5, TimeUnit.SECONDS); // nobody binds it now

            Lease renewed = holder.lease("vol", "holder", Duration.ofSeconds(30), first.leaseId())
                    .get(20, TimeUnit.SECONDS);
            assertNotEquals(first.epoch(), renewed.epoch(), "a renewal after a lapse is a new grant");
            assertEquals(Boolean.FALSE, renewed.continued(), "the intruder opened a region meanwhile");
            ExecutionException refused = assertThrows(ExecutionException.class,
                    () -> write(intruder, stolen, pattern('I', 4096)));
            assertEquals(Status.ACCESS_DENIED, ((RemoteMemoryException) refused.getCause()).status(),
                    refused.getCause().toString());
            RegionDescriptor reopened = holder.open(region.id()).get(5, TimeUnit.SECONDS);
            assertEquals(describe(new byte[4096]), describe(read(holder, reopened, 4096)), "the intruder's bytes");
        }
    }

    @Test
    void aReleasedRegionThatAnOperationStillPinsCountsAgainstTheCapacity() throws Exception {
        try (Memserver m = start(4L * MIB); RawClient stalled = new RawClient(m);
                RemoteConnection other = connect(m, "other")) {
            stalled.send(new Message.Allocate(stalled.nextId++, 2L * MIB, new RegionTag("scratch", 0, 0, 1)));
            RegionDescriptor region = ((Message.AllocateReply) stalled.reply()).region();
            stalled.send(new Message.Write(stalled.nextId++, region.id(), region.key(), 0, MIB));
            stalled.sendData(pattern('S', 64 << 10));
            await(() -> m.stats().residentBytes() >= 64 << 10, "the stalled write's first bytes arrived");

            RegionDescriptor opened = other.open(region.id()).get(5, TimeUnit.SECONDS); // an unleased volume
            other.release(opened).get(5, TimeUnit.SECONDS);
            assertEquals(2L * MIB, m.stats().lingeringBytes(), "released, but the stalled WRITE pins it");
            assertEquals(2L * MIB, m.grantedBytes(), "still counted against the capacity");
            ExecutionException full = assertThrows(ExecutionException.class,
                    () -> other.allocate(new RegionTag("more", 0, 0, 1), 3L * MIB).get(5, TimeUnit.SECONDS));
            assertEquals(Status.NO_CAPACITY, ((RemoteMemoryException) full.getCause()).status());

            stalled.close(); // the pin ends with the connection
            await(() -> m.grantedBytes() == 0 && m.stats().lingeringBytes() == 0, "the memory was unmapped");
            other.allocate(new RegionTag("more", 0, 0, 1), 3L * MIB).get(5, TimeUnit.SECONDS);
        }
    }

    @Test
    void aWriteWhoseDataStopsComingIsCutOffAtThePayloadDeadline() throws Exception {
        try (Memserver m = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 64L * MIB,
                TOKEN, "tcp", false, false, ConnectParams.TCP_CONGESTION_DEFAULT, ConnectionLimits.DEFAULTS,
                MemserverConfig.MAX_REGIONS_DEFAULT), Duration.ofMillis(500)); RawClient stalled = new RawClient(m)) {
            stalled.send(new Message.Allocate(stalled.nextId++, 2L * MIB, new RegionTag("scratch", 0, 0, 1)));
            RegionDescriptor region = ((Message.AllocateReply) stalled.reply()).region();
            stalled.send(new Message.Write(stalled.nextId++, region.id(), region.key(), 0, MIB));
            stalled.sendData(pattern('S', 64 << 10));
            long start = System.nanoTime();
            assertThrows(IOException.class, stalled::reply, "the memserver cut the stalled writer off");
            assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(10), "within the deadline, roughly");
            await(() -> m.grantedBytes() == 0, "its scratch region went with it");
        }
    }
}
