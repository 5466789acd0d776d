package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.channels.Pipe;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

/**
 * Not a test: what handing completions off the UCX progress thread ({@link UcxCompletions}) costs, over UCX's
 * loopback in this JVM (UCX_TLS=tcp or sm; memserver and client share the host's cores). 4 KiB reads and writes at
 * queue depth 1 (latency) and 16 (throughput), each callback either empty or writing the page to a pipe that another
 * thread drains (as the bridge writes an NBD reply). Hand-off and inline alternate, {@code rounds} times each; CPU is
 * the whole process's per operation. Run with the test classpath: {@code UcxHandOffBench [ops] [rounds]}.
 */
public final class UcxHandOffBench {
    private UcxHandOffBench() {}

    public static void main(String[] args) throws Exception {
        int ops = args.length > 0 ? Integer.parseInt(args[0]) : 20_000;
        int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 3;
        Pipe pipe = Pipe.open();
        Thread drain = Thread.ofPlatform().daemon().start(() -> {
            ByteBuffer b = ByteBuffer.allocateDirect(1 << 20);
            try {
                while (pipe.source().read(b.clear()) >= 0) {
                    // discard
                }
            } catch (Exception e) {
                // closed
            }
        });
        try (UcxLoopback loopback = new UcxLoopback("bench")) {
            System.out.printf("%-8s %-5s %-6s %3s %10s %10s %10s %12s%n", "mode", "op", "cb", "qd", "p50 us",
                    "p99 us", "kops/s", "cpu us/op");
            for (int round = 0; round < rounds; round++) {
                for (boolean inline : new boolean[]{false, true}) {
                    UcxConnection.completeOnProgressThreadForBench = inline;
                    try (UcxConnection c = loopback.connect("bench"); Arena arena = Arena.ofShared()) {
                        RegionDescriptor r = c.allocate(RegionTag.scratch("bench"), 64 << 20).get(30,
                                TimeUnit.SECONDS);
                        for (boolean write : new boolean[]{false, true}) {
                            for (boolean reply : new boolean[]{false, true}) {
                                for (int qd : new int[]{1, 16}) {
                                    run(c, r, arena, write, reply ? pipe.sink() : null, qd, ops / 10); // warm-up
                                    String line = run(c, r, arena, write, reply ? pipe.sink() : null, qd, ops);
                                    System.out.printf("%-8s %-5s %-6s %3d %s%n", inline ? "inline" : "hand-off",
                                            write ? "write" : "read", reply ? "reply" : "empty", qd, line);
                                }
                            }
                        }
                    }
                }
            }
        } finally {
            pipe.sink().close();
            drain.join(5_000);
        }
    }

    private static String run(UcxConnection c, RegionDescriptor r, Arena arena, boolean write,
            Pipe.SinkChannel reply, int qd, int ops) throws Exception {
        List<MemorySegment> pages = new ArrayList<>();
        for (int i = 0; i < qd; i++) {
            pages.add(arena.allocate(4096, 4096));
        }
        long[] latency = new long[ops];
        Semaphore slots = new Semaphore(qd);
        var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long cpu0 = os.getProcessCpuTime();
        long t0 = System.nanoTime();
        List<CompletableFuture<Void>> last = new ArrayList<>();
        for (int i = 0; i < ops; i++) {
            slots.acquire();
            MemorySegment page = pages.get(i % qd);
            long offset = (i * 7919L % 16384) * 4096;
            long start = System.nanoTime();
            int n = i;
            CompletableFuture<Void> f = (write ? c.write(r, offset, page) : c.read(r, offset, page))
                    .whenComplete((v, e) -> {
                        if (reply != null && e == null) {
                            try {
                                synchronized (reply) {
                                    ByteBuffer b = page.asByteBuffer();
                                    while (b.hasRemaining()) {
                                        reply.write(b);
                                    }
                                }
                            } catch (Exception x) {
                                throw new IllegalStateException(x);
                            }
                        }
                        latency[n] = System.nanoTime() - start;
                        slots.release();
                    });
            if (i >= ops - qd) {
                last.add(f);
            }
        }
        CompletableFuture.allOf(last.toArray(CompletableFuture[]::new)).get(60, TimeUnit.SECONDS);
        slots.acquire(qd);
        long elapsed = System.nanoTime() - t0;
        long cpu = os.getProcessCpuTime() - cpu0;
        Arrays.sort(latency);
        return String.format("%10.1f %10.1f %10.1f %12.2f", latency[ops / 2] / 1e3, latency[ops * 99 / 100] / 1e3,
                ops / (elapsed / 1e6), cpu / 1e3 / ops);
    }
}
