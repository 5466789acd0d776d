import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;

/**
 * The plain-NIO baseline of docs/transports.md, rebuilt so that bench/rdma-tcp.sh measures it in the same run
 * as the tcp provider: blocking SocketChannels, one platform thread per connection on both sides, and a client that
 * writes one request and blocks reading its reply. Nothing is pipelined; QD N means N connections, each with its own
 * client thread and server thread.
 *
 * <p>The server maps a 1 GiB anonymous region (lazily backed, as the memserver's regions are). A WRITE is answered
 * once its data has been read from the socket straight into the region (complete = in the server's memory); a READ is
 * answered with one gathering write of the reply header and the region slice. The client times one operation from
 * just before its request is written to just after its reply (and READ data) has been read: the same span as
 * {@code rbridge bench} (posting to completion) without any thread hand-off.
 *
 * <p>Both ends print what {@code rbridge bench} prints on its fourth line, so the script parses them alike:
 * <pre>
 *   java --enable-native-access=ALL-UNNAMED NioBaseline.java server 127.0.0.1:0      # prints "listening on H:P"
 *   java NioBaseline.java client H:P read-lat  4K 1  20000          # iterations (after a warm-up: a tenth as many, >= 1 s)
 *   java NioBaseline.java client H:P write-bw  4K 32 5              # seconds (after a 1 s warm-up)
 * </pre>
 * Operation {@code slot} (0..QD-1) uses offset {@code slot * size}, as {@code rbridge bench} does; the slots are
 * written once before timing so that reads hit written memory.
 *
 * <p>Wire (little-endian): request {@code u32 op (1 READ, 2 WRITE), u32 length, u64 offset, u64 id}, then WRITE data;
 * reply {@code u64 id, u32 status (0 ok), u32 length}, then READ data.
 */
public class NioBaseline {
    static final long REGION = 1L << 30;
    static final int READ = 1;
    static final int WRITE = 2;
    static final int REQUEST = 24;
    static final int REPLY = 16;
    static final int MAX_DATA = 16 << 20;

    public static void main(String[] args) throws Throwable {
        if (args.length >= 2 && args[0].equals("server")) {
            server(address(args[1]));
        } else if (args.length >= 6 && args[0].equals("client")) {
            client(address(args[1]), args[2], (int) size(args[3]), Integer.parseInt(args[4]), Integer.parseInt(args[5]));
        } else {
            System.err.println("usage: NioBaseline server HOST:PORT | client HOST:PORT read-lat|write-lat|read-bw|"
                    + "write-bw SIZE QD ITERS|SECONDS");
            System.exit(2);
        }
    }

    // ---------------------------------------------------------------------------------------------- server

    static void server(InetSocketAddress at) throws Throwable {
        MemorySegment region = mapAnonymous(REGION);
        ServerSocketChannel ss = ServerSocketChannel.open();
        ss.setOption(StandardSocketOptions.SO_REUSEADDR, true);
        ss.bind(at, 128);
        InetSocketAddress bound = (InetSocketAddress) ss.getLocalAddress();
        System.out.println("listening on " + bound.getHostString() + ":" + bound.getPort());
        System.out.flush();
        while (true) {
            SocketChannel ch = ss.accept();
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            Thread t = new Thread(() -> serve(ch, region), "conn");
            t.setDaemon(true);
            t.start();
        }
    }

    static void serve(SocketChannel ch, MemorySegment region) {
        ByteBuffer in = ByteBuffer.allocateDirect(64 << 10).order(ByteOrder.LITTLE_ENDIAN).flip();
        ByteBuffer reply = ByteBuffer.allocateDirect(REPLY).order(ByteOrder.LITTLE_ENDIAN);
        ByteBuffer[] vector = new ByteBuffer[2];
        try (ch) {
            while (true) {
                while (in.remaining() < REQUEST) { // one read usually brings the header and a small WRITE's data
                    in.compact();
                    int r = ch.read(in);
                    in.flip();
                    if (r < 0) {
                        return;
                    }
                }
                int op = in.getInt();
                int length = in.getInt();
                long offset = in.getLong();
                long id = in.getLong();
                if ((op != READ && op != WRITE) || length < 0 || length > MAX_DATA || offset < 0
                        || offset > REGION - length) {
                    throw new IOException("bad request op " + op + " length " + length + " offset " + offset);
                }
                ByteBuffer slice = region.asSlice(offset, length).asByteBuffer();
                reply.clear().putLong(id).putInt(0).putInt(op == READ ? length : 0).flip();
                if (op == WRITE) {
                    int buffered = Math.min(in.remaining(), length);
                    slice.put(in.slice(in.position(), buffered));
                    in.position(in.position() + buffered);
                    readFully(ch, slice); // the rest straight from the socket into the region
                    writeFully(ch, reply);
                } else {
                    vector[0] = reply;
                    vector[1] = slice;
                    while (slice.hasRemaining()) {
                        ch.write(vector);
                    }
                }
            }
        } catch (IOException e) {
            System.err.println("connection ended: " + e);
        }
    }

    /** An anonymous private mapping, touched only where written: as the memserver's AnonymousMemory. */
    static MemorySegment mapAnonymous(long size) throws Throwable {
        Linker linker = Linker.nativeLinker();
        MethodHandle mmap = linker.downcallHandle(linker.defaultLookup().find("mmap").orElseThrow(),
                FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG,
                        ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_LONG));
        int protReadWrite = 0x3, mapPrivateAnonymous = 0x02 | 0x20;
        MemorySegment m = (MemorySegment) mmap.invokeExact(MemorySegment.NULL, size, protReadWrite,
                mapPrivateAnonymous, -1, 0L);
        if (m.address() == -1L) {
            throw new IOException("mmap of " + size + " bytes failed");
        }
        return m.reinterpret(size);
    }

    // ---------------------------------------------------------------------------------------------- client

    /** One connection, one thread, one operation at a time. */
    static final class Conn {
        final SocketChannel ch;
        final ByteBuffer request = ByteBuffer.allocateDirect(REQUEST).order(ByteOrder.LITTLE_ENDIAN);
        final ByteBuffer reply = ByteBuffer.allocateDirect(REPLY).order(ByteOrder.LITTLE_ENDIAN);
        final ByteBuffer data;
        final ByteBuffer[] vector = new ByteBuffer[2];
        final long offset;
        long ids;

        Conn(InetSocketAddress server, int size, long offset, Arena arena) throws IOException {
            ch = SocketChannel.open(server);
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            data = arena.allocate(size, 4096).fill((byte) offset).asByteBuffer();
            this.offset = offset;
        }

        void op(int op) throws IOException {
            long id = ids++;
            request.clear().putInt(op).putInt(data.capacity()).putLong(offset).putLong(id).flip();
            data.clear();
            if (op == WRITE) {
                vector[0] = request;
                vector[1] = data;
                while (data.hasRemaining()) {
                    ch.write(vector);
                }
            } else {
                writeFully(ch, request);
            }
            reply.clear();
            if (op == READ) { // header and data in one scattering read, as the server writes them
                vector[0] = reply;
                vector[1] = data.clear();
                while (data.hasRemaining()) {
                    if (ch.read(vector) < 0) {
                        throw new EOFException();
                    }
                }
            } else {
                readFully(ch, reply);
            }
            reply.flip();
            long got = reply.getLong();
            int status = reply.getInt();
            int length = reply.getInt();
            if (got != id || status != 0 || length != (op == READ ? data.capacity() : 0)) {
                throw new IOException("bad reply id " + got + " status " + status + " length " + length);
            }
        }
    }

    static void client(InetSocketAddress server, String test, int size, int depth, int amount) throws Exception {
        boolean read = test.startsWith("read");
        int op = read ? READ : WRITE;
        if (size <= 0 || size > MAX_DATA || (long) size * depth > REGION) {
            throw new IllegalArgumentException("size " + size + " x QD " + depth + " does not fit");
        }
        Arena arena = Arena.ofShared();
        List<Conn> conns = new ArrayList<>();
        for (int i = 0; i < (test.endsWith("lat") ? 1 : depth); i++) {
            Conn c = new Conn(server, size, (long) i * size, arena);
            c.op(WRITE); // reads hit written memory
            conns.add(c);
        }
        System.out.println("Transport: plain NIO baseline, " + conns.size() + " connection(s) to " + server);
        if (test.endsWith("lat")) {
            latency(conns.get(0), op, size, amount);
        } else {
            bandwidth(conns, op, size, amount);
        }
        for (Conn c : conns) {
            c.ch.close();
        }
    }

    static void latency(Conn c, int op, int size, int iters) throws IOException {
        // Warm-up, unmeasured, the same rule as rbridge bench: a tenth of the iterations and at least a second.
        int warmup = Math.max(100, iters / 10);
        long warmUntil = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
        for (int k = 0; k < warmup || System.nanoTime() < warmUntil; k++) {
            c.op(op);
        }
        long[] s = new long[iters];
        for (int k = 0; k < iters; k++) {
            long start = System.nanoTime();
            c.op(op);
            s[k] = System.nanoTime() - start;
        }
        Arrays.sort(s);
        int n = s.length;
        double avg = Arrays.stream(s).average().orElse(0);
        double var = Arrays.stream(s).mapToDouble(x -> (x - avg) * (x - avg)).sum() / Math.max(1, n - 1);
        String line = "-".repeat(119);
        System.out.println(line);
        System.out.printf(" %-8s %-12s %-12s %-12s %-16s %-12s %-14s %-22s %-22s%n", "#bytes", "#iterations",
                "t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]",
                "99% percentile[usec]", "99.9% percentile[usec]");
        System.out.printf(" %-8d %-12d %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %-22.2f %-22.2f%n", size, n,
                s[0] / 1e3, s[n - 1] / 1e3, s[n / 2] / 1e3, avg / 1e3, Math.sqrt(var) / 1e3,
                percentile(s, 0.99) / 1e3, percentile(s, 0.999) / 1e3);
        System.out.println(line);
    }

    static void bandwidth(List<Conn> conns, int op, int size, int seconds) throws Exception {
        // The client threads time the window themselves: with QD threads on a busy CPU, a separate timekeeper thread
        // can be woken late enough to skew the figures. Operations completing inside [measureFrom, end) count; the
        // process CPU time is read by the first thread to pass each edge.
        LongAdder done = new LongAdder();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        AtomicLong cpuFrom = new AtomicLong(-1), cpuTo = new AtomicLong(-1);
        long measureFrom = System.nanoTime() + TimeUnit.SECONDS.toNanos(1); // warm-up: a second, unmeasured
        long end = measureFrom + TimeUnit.SECONDS.toNanos(seconds);
        CountDownLatch finished = new CountDownLatch(conns.size());
        for (Conn c : conns) {
            Thread t = new Thread(() -> {
                try {
                    while (true) {
                        c.op(op);
                        long now = System.nanoTime();
                        if (now >= end) {
                            if (cpuTo.get() < 0) {
                                cpuTo.compareAndSet(-1, cpuNanos());
                            }
                            break;
                        }
                        if (now >= measureFrom) {
                            if (cpuFrom.get() < 0) {
                                cpuFrom.compareAndSet(-1, cpuNanos());
                            }
                            done.increment();
                        }
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                } finally {
                    finished.countDown();
                }
            }, "client");
            t.setDaemon(true);
            t.start();
        }
        finished.await();
        if (failure.get() != null) {
            throw new IOException("a client failed", failure.get());
        }
        long ops = done.sum();
        double elapsed = (end - measureFrom) / 1e9;
        double cpu = (cpuTo.get() - cpuFrom.get()) / 1e9;
        double average = ops * (double) size / elapsed / 1e6;
        double gb = ops * (double) size / 1e9;
        String line = "-".repeat(100);
        System.out.println(line);
        System.out.printf(" %-10s %-14s %-18s %-21s %-14s %-18s%n", "#bytes", "#iterations", "BW peak[MB/sec]",
                "BW average[MB/sec]", "MsgRate[Mpps]", "CPU[s/GB, client]");
        // No peak here: the threads do not report per interval; the average stands in for it.
        System.out.printf(" %-10d %-14d %-18.2f %-21.2f %-14.6f %-18.3f%n", size, ops, average, average,
                ops / elapsed / 1e6, gb > 0 ? cpu / gb : 0);
        System.out.println(line);
    }

    // --------------------------------------------------------------------------------------------- helpers

    static void readFully(SocketChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            if (ch.read(b) < 0) {
                throw new EOFException();
            }
        }
    }

    static void writeFully(SocketChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            ch.write(b);
        }
    }

    static long percentile(long[] sorted, double p) {
        return sorted[Math.min(sorted.length - 1, (int) Math.ceil(sorted.length * p) - 1)];
    }

    static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    static InetSocketAddress address(String s) {
        int colon = s.lastIndexOf(':');
        return new InetSocketAddress(s.substring(0, colon), Integer.parseInt(s.substring(colon + 1)));
    }

    static long size(String s) {
        char unit = Character.toUpperCase(s.charAt(s.length() - 1));
        long mult = unit == 'K' ? 1 << 10 : unit == 'M' ? 1 << 20 : unit == 'G' ? 1 << 30 : 1;
        return Long.parseLong(mult == 1 ? s : s.substring(0, s.length() - 1)) * mult;
    }
}
