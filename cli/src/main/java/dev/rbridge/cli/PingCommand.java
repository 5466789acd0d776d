package dev.rbridge.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintWriter;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;

/**
 * {@code rbridge ping}: krping for this project. Each round writes a pattern into a remote region, reads it back and
 * (with --validate) compares; prints per-round (--verbose) and summary round-trip times.
 */
@Command(name = "ping",
        mixinStandardHelpOptions = true,
        description = {"Write a pattern to a memserver region, read it back, optionally compare; report round trips.",
                "Exits 1 on the first mismatch (with the offset and bytes) or on any failed operation."},
        footer = {"", "Example:", "  rbridge ping --server 10.0.0.5:" + Defaults.MEMSERVER_PORT
                + " --token-file /etc/rbridge/token --count 100 --size 64K --validate"})
final class PingCommand implements Callable<Integer> {

    @Option(names = "--count", paramLabel = "N", defaultValue = "" + Defaults.PING_ROUNDS,
            description = "Rounds. Default ${DEFAULT-VALUE}.")
    int count;

    @Option(names = "--validate", description = "Compare what was read with what was written.")
    boolean validate;

    @Option(names = "--verbose", description = "Print every round.")
    boolean verbose;

    @CommandLine.Mixin
    TransferTestOptions transfer;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        int bytes = transfer.bytes(spec);
        if (count <= 0) {
            throw new CommandLine.ParameterException(spec.commandLine(), "--count must be positive");
        }
        PrintWriter out = spec.commandLine().getOut();
        PrintWriter err = spec.commandLine().getErr();
        MemserverClientOptions remote = transfer.remote;
        long wait = remote.answerWaitSeconds();
        return remote.withScratchRegion(spec, "ping", bytes, (c, region, arena) -> {
            MemorySegment src = arena.allocate(bytes);
            MemorySegment dst = arena.allocate(bytes);
            long[] rtts = new long[count];
            for (int round = 0; round < count; round++) {
                fill(src, round);
                long start = System.nanoTime();
                c.write(region, 0, src).get(wait, TimeUnit.SECONDS);
                c.read(region, 0, dst).get(wait, TimeUnit.SECONDS);
                rtts[round] = System.nanoTime() - start;
                if (validate) {
                    long at = src.mismatch(dst);
                    if (at >= 0) {
                        err.printf("ping: MISMATCH in round %d at byte %d: wrote 0x%02x, read 0x%02x%n", round, at,
                                src.get(ValueLayout.JAVA_BYTE, at), dst.get(ValueLayout.JAVA_BYTE, at));
                        return 1;
                    }
                }
                if (verbose) {
                    out.printf("round %d: %d bytes written and read back%s in %.1f us%n", round, bytes,
                            validate ? ", validated" : "", rtts[round] / 1000.0);
                }
            }
            Arrays.sort(rtts);
            double avg = Arrays.stream(rtts).average().orElse(0) / 1000.0;
            double p99 = rtts[Math.min(count - 1, (int) Math.ceil(count * 0.99) - 1)] / 1000.0;
            if (transfer.json) {
                java.util.Map<String, Object> r = new java.util.LinkedHashMap<>();
                r.put("server", remote.server);
                r.put("rounds", count);
                r.put("bytes", bytes);
                r.put("validated", validate);
                r.put("rtt_us", java.util.Map.of("min", rtts[0] / 1000.0, "avg", avg, "p50", rtts[count / 2] / 1000.0,
                        "p99", p99, "max", rtts[count - 1] / 1000.0));
                out.println(dev.rbridge.ops.json.Json.write(r));
                return 0;
            }
            out.printf("ping %s: %d rounds of %d bytes%s; write+read rtt min/avg/p50/p99/max = "
                    + "%.1f/%.1f/%.1f/%.1f/%.1f us%n", remote.server, count, bytes,
                    validate ? ", all validated" : "", rtts[0] / 1000.0, avg, rtts[count / 2] / 1000.0,
                    p99, rtts[count - 1] / 1000.0);
            return 0;
        });
    }

    /** A pattern that differs per round and per position, so a stale or shifted read cannot pass. */
    private static void fill(MemorySegment s, int round) {
        for (long i = 0; i < s.byteSize(); i++) {
            s.set(ValueLayout.JAVA_BYTE, i, (byte) (i * 31 + round * 7 + (i >>> 8)));
        }
    }
}
