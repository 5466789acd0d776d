package dev.rbridge.cli;

import com.sun.management.OperatingSystemMXBean;
import dev.rbridge.rdma.ucx.UcxProvider;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintWriter;
import java.lang.foreign.MemorySegment;
import java.lang.management.ManagementFactory;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * {@code rbridge bench}: perftest for this project. Latency tests run one operation at a time and print the
 * ib_*_lat columns; bandwidth tests keep {@code --tx-depth} operations in flight and print the ib_*_bw columns, plus
 * this process's CPU seconds per GB moved.
 */
@Command(name = "bench",
        mixinStandardHelpOptions = true,
        description = {"Measure remote-memory latency or bandwidth against a memserver, perftest style.",
                "read-lat/write-lat: one operation at a time, microseconds from posting it to its completion "
                        + "(--completion thread: until the provider's thread completes it; waking the waiting "
                        + "thread is not counted).",
                "read-bw/write-bw: --tx-depth operations in flight; --duplex mixes reads and writes."},
        footer = {"", "Examples:",
                "  rbridge bench --server 10.0.0.5:" + Defaults.MEMSERVER_PORT + " --token-file /etc/rbridge/token \\",
                "      --test read-lat --size 4K --iters 20000",
                "  rbridge bench --server 10.0.0.5:" + Defaults.MEMSERVER_PORT + " --token-file /etc/rbridge/token \\",
                "      --test write-bw --size 1M --tx-depth 8 --time 10"})
final class BenchCommand implements Callable<Integer> {
    enum Test {
        READ_LAT, WRITE_LAT, READ_BW, WRITE_BW
    }

    @Option(names = "--test", required = true, converter = TestConverter.class,
            description = "read-lat, write-lat, read-bw or write-bw.")
    Test test;

    @Option(names = "--tx-depth", paramLabel = "N", defaultValue = "" + Defaults.BENCH_TX_DEPTH,
            description = "Operations in flight in bandwidth tests. Default ${DEFAULT-VALUE}.")
    int txDepth;

    @Option(names = "--iters", paramLabel = "N", defaultValue = "" + Defaults.BENCH_ITERATIONS,
            description = "Operations to time (after an unmeasured warm-up of a tenth as many, and at least a second), "
                    + "unless --time. Default ${DEFAULT-VALUE}.")
    int iters;

    @Option(names = "--time", paramLabel = "SECONDS", description = "Run for this long instead of --iters.")
    Integer time;

    @Option(names = "--duplex", description = "Bandwidth tests: half the operations read, half write.")
    boolean duplex;

    @CommandLine.Mixin
    TransferTestOptions transfer;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    static final class TestConverter implements CommandLine.ITypeConverter<Test> {
        public Test convert(String value) {
            try {
                return Test.valueOf(value.toUpperCase(Locale.ROOT).replace('-', '_'));
            } catch (IllegalArgumentException e) {
                throw new CommandLine.TypeConversionException("'" + value
                        + "' is not a test (read-lat, write-lat, read-bw, write-bw)");
            }
        }
    }

    private interface Op {
        CompletableFuture<Void> run(int slot, boolean read);
    }

    @Override
    public Integer call() throws Exception {
        int bytes = transfer.bytes(spec);
        if (txDepth <= 0 || iters <= 0 || (time != null && time <= 0)) {
            throw new CommandLine.ParameterException(spec.commandLine(), "--tx-depth, --iters and --time must be"
                    + " positive");
        }
        PrintWriter out = spec.commandLine().getOut();
        boolean latency = test == Test.READ_LAT || test == Test.WRITE_LAT;
        int slots = latency ? 1 : txDepth;
        MemserverClientOptions remote = transfer.remote;
        long wait = remote.answerWaitSeconds();
        boolean lanes = remote.link.transport.equals("ucx") && UcxProvider.reportLanes(); // before UCX loads
        return remote.withScratchRegion(spec, "bench", (long) bytes * slots, (c, region, arena) -> {
            MemorySegment[] buffers = new MemorySegment[slots];
            for (int i = 0; i < slots; i++) {
                buffers[i] = arena.allocate(bytes, 4096).fill((byte) i);
                c.write(region, (long) i * bytes, buffers[i]).get(wait, TimeUnit.SECONDS); // reads hit written memory
            }
            Op op = (slot, read) -> read ? c.read(region, (long) slot * bytes, buffers[slot])
                    : c.write(region, (long) slot * bytes, buffers[slot]);
            if (!transfer.json) {
                out.println("Transport: " + remote.link.transport + " (" + c + "), memserver " + c.server().serverId());
            }
            if (lanes && !transfer.json) {
                // UCX's own account of the transports it chose: rma(rc_verbs/...) is RDMA, rma_am(tcp/...) is not.
                List<String> chosen = UcxProvider.lanes();
                out.println("UCX lanes: " + (chosen.isEmpty() ? "not reported (set UCX_LOG_LEVEL=info to see them)"
                        : String.join(" | ", chosen)));
            }
            if (latency) {
                latency(out, op, test == Test.READ_LAT, bytes);
            } else {
                // Warm-up: a second of the same load, unmeasured, so the JIT has compiled the data path.
                runChains(op, test == Test.READ_BW, System.nanoTime() + 1_000_000_000L, Long.MAX_VALUE);
                bandwidth(out, op, test == Test.READ_BW, bytes);
            }
            return 0;
        });
    }

    private void latency(PrintWriter out, Op op, boolean read, int bytes) throws Exception {
        // Posted from this thread, timed until the completion runs: on the provider's thread (--completion thread,
        // what the bridge sees: its NBD threads issue, replies leave from the completion; waking this thread is not
        // counted) or on this one, which reads the reply itself (--completion caller, a synchronous client).
        // Warm-up, unmeasured: a tenth of the iterations and at least a second. Until the JIT has compiled the data
        // path its compiler threads compete for the CPU, which with client and memserver on one CPU put one
        // operation in a hundred at a scheduler tick (ms) in the first 20000.
        int warmup = Math.max(100, iters / 10);
        long warmUntil = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
        for (int k = 0; k < warmup || System.nanoTime() < warmUntil; k++) {
            timeOne(op, read);
        }
        long[] samples = new long[time == null ? iters : 1 << 20];
        long limit = time == null ? Long.MAX_VALUE : System.nanoTime() + TimeUnit.SECONDS.toNanos(time);
        int n = 0;
        while (n < samples.length && (time == null ? n < iters : System.nanoTime() < limit)) {
            samples[n++] = timeOne(op, read);
        }
        long[] s = Arrays.copyOf(samples, n);
        Arrays.sort(s);
        double avg = Arrays.stream(s).average().orElse(0);
        double var = Arrays.stream(s).mapToDouble(x -> (x - avg) * (x - avg)).sum() / Math.max(1, n - 1);
        if (transfer.json) {
            java.util.Map<String, Object> r = new java.util.LinkedHashMap<>();
            r.put("test", test.name().toLowerCase(java.util.Locale.ROOT).replace('_', '-'));
            r.put("bytes", bytes);
            r.put("iterations", n);
            r.put("t_min_us", s[0] / 1e3);
            r.put("t_max_us", s[n - 1] / 1e3);
            r.put("t_typical_us", s[n / 2] / 1e3);
            r.put("t_avg_us", avg / 1e3);
            r.put("t_stdev_us", Math.sqrt(var) / 1e3);
            r.put("p99_us", percentile(s, 0.99) / 1e3);
            r.put("p999_us", percentile(s, 0.999) / 1e3);
            out.println(dev.rbridge.ops.json.Json.write(r));
            return;
        }
        String line = "-".repeat(119);
        out.println(line);
        out.printf(" %-8s %-12s %-12s %-12s %-16s %-12s %-14s %-22s %-22s%n", "#bytes", "#iterations", "t_min[usec]",
                "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]",
                "99.9% percentile[usec]");
        out.printf(" %-8d %-12d %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %-22.2f %-22.2f%n", bytes, n, s[0] / 1e3,
                s[n - 1] / 1e3, s[n / 2] / 1e3, avg / 1e3, Math.sqrt(var) / 1e3, percentile(s, 0.99) / 1e3,
                percentile(s, 0.999) / 1e3);
        out.println(line);
    }

    /** One operation, posted and waited on: nanoseconds from posting to its completion. */
    private long timeOne(Op op, boolean read) throws Exception {
        long[] completedAt = new long[1];
        long start = System.nanoTime();
        CompletableFuture<Void> f = op.run(0, read);
        CompletableFuture<Void> timed = f.whenComplete((v, t) -> completedAt[0] = System.nanoTime());
        long wait = transfer.remote.answerWaitSeconds();
        if (transfer.remote.callerReads()) {
            f.get(wait, TimeUnit.SECONDS); // the operation's own future: waiting on it, we read for it
        }
        // In thread mode wait on the stamp's future, not on f: a future runs its dependents last-registered first, so
        // a waiter on f would be woken (a futex wake, a few µs here) before the stamp, and that would be counted. A
        // caller that cannot take the read role waits on f and is woken so too: a synchronous client's real wait.
        timed.get(wait, TimeUnit.SECONDS);
        return completedAt[0] - start;
    }

    /** Runs the chains until {@code end} or {@code maxOps} operations; returns the operations done. */
    private long runChains(Op op, boolean read, long end, long maxOps) throws Exception {
        AtomicLong done = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch chains = new CountDownLatch(txDepth);
        AtomicLong issued = new AtomicLong();
        for (int chain = 0; chain < txDepth; chain++) {
            new Chain(op, chain, read, done, issued, failure, chains, end, maxOps).next();
        }
        chains.await();
        if (failure.get() != null) {
            throw new ExecutionException(failure.get());
        }
        return done.get();
    }

    private void bandwidth(PrintWriter out, Op op, boolean read, int bytes) throws Exception {
        // Like perftest, the next operation is posted from the completion of the last one: txDepth chains, each
        // with its own buffer, so the issuing thread never sleeps between operations.
        AtomicLong done = new AtomicLong();
        AtomicLong issued = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch chains = new CountDownLatch(txDepth);
        long cpuStart = cpuNanos();
        long start = System.nanoTime();
        long end = time == null ? Long.MAX_VALUE : start + TimeUnit.SECONDS.toNanos(time);
        for (int chain = 0; chain < txDepth; chain++) {
            new Chain(op, chain, read, done, issued, failure, chains, end, time == null ? iters : Long.MAX_VALUE)
                    .next();
        }
        long windowStart = start;
        long windowDone = 0;
        double peak = 0;
        while (!chains.await(100, TimeUnit.MILLISECONDS)) {
            long now = System.nanoTime();
            long d = done.get();
            peak = Math.max(peak, (d - windowDone) * (double) bytes / ((now - windowStart) / 1e9) / 1e6);
            windowStart = now;
            windowDone = d;
        }
        long elapsed = System.nanoTime() - start;
        double cpu = (cpuNanos() - cpuStart) / 1e9;
        if (failure.get() != null) {
            throw new ExecutionException(failure.get());
        }
        long ops = done.get();
        double average = ops * (double) bytes / (elapsed / 1e9) / 1e6;
        double gb = ops * (double) bytes / 1e9;
        if (transfer.json) {
            java.util.Map<String, Object> r = new java.util.LinkedHashMap<>();
            r.put("test", test.name().toLowerCase(java.util.Locale.ROOT).replace('_', '-'));
            r.put("bytes", bytes);
            r.put("operations", ops);
            r.put("bw_peak_mb_s", Math.max(peak, average));
            r.put("bw_average_mb_s", average);
            r.put("msg_rate_mpps", ops / (elapsed / 1e9) / 1e6);
            r.put("cpu_s_per_gb_client", gb > 0 ? cpu / gb : 0);
            out.println(dev.rbridge.ops.json.Json.write(r));
            return;
        }
        String line = "-".repeat(100);
        out.println(line);
        out.printf(" %-10s %-14s %-18s %-21s %-14s %-18s%n", "#bytes", "#iterations", "BW peak[MB/sec]",
                "BW average[MB/sec]", "MsgRate[Mpps]", "CPU[s/GB, client]");
        out.printf(" %-10d %-14d %-18.2f %-21.2f %-14.6f %-18.3f%n", bytes, ops, Math.max(peak, average), average,
                ops / (elapsed / 1e9) / 1e6, gb > 0 ? cpu / gb : 0);
        out.println(line);
    }

    /** One operation in flight at a time, re-posted from its own completion until the run ends. */
    private final class Chain {
        private final Op op;
        private final int slot;
        private final boolean read;
        private final AtomicLong done;
        private final AtomicLong issued;
        private final AtomicReference<Throwable> failure;
        private final CountDownLatch finished;
        private final long end;
        private final long maxOps;
        private long count;

        Chain(Op op, int slot, boolean read, AtomicLong done, AtomicLong issued, AtomicReference<Throwable> failure,
                CountDownLatch finished, long end, long maxOps) {
            this.maxOps = maxOps;
            this.op = op;
            this.slot = slot;
            this.read = read;
            this.done = done;
            this.issued = issued;
            this.failure = failure;
            this.finished = finished;
            this.end = end;
        }

        void next() {
            boolean more = failure.get() == null && issued.getAndIncrement() < maxOps && System.nanoTime() < end;
            if (!more) {
                finished.countDown();
                return;
            }
            boolean r = duplex ? (count++ & 1) == (slot & 1) : read;
            op.run(slot, r).whenComplete((v, t) -> {
                if (t != null) {
                    failure.compareAndSet(null, t);
                }
                done.incrementAndGet();
                next();
            });
        }
    }

    private static long percentile(long[] sorted, double p) {
        return sorted[Math.min(sorted.length - 1, (int) Math.ceil(sorted.length * p) - 1)];
    }

    private static long cpuNanos() {
        return ((OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }
}
