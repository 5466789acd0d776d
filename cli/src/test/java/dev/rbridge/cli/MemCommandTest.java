package dev.rbridge.cli;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.tcp.TcpProvider;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code rbridge mem read|write|list} as separate processes against a memserver process, with the regions allocated
 * and cross-checked through this JVM's own connection.
 */
@Timeout(90)
@Tag("interop")
class MemCommandTest {
    private static final Pattern LENDING = Pattern.compile("lending \\S+ at (\\S+)");

    private Path dir;
    private String address;

    @Test
    void readsWritesAndListsRegionsOfAMemserverProcess() throws Exception {
        dir = Files.createTempDirectory("mem-command");
        Files.writeString(dir.resolve("token"), "t\n"); // the tools' token from a file: --token would warn
        Path log = dir.resolve("memserver.log");
        Process m = CliProcess.start(log, "memserver", "--listen", "127.0.0.1:0", "--admin", "none",
                "--capacity", "64M", "--token", "t");
        try {
            String line = new BufferedReader(new InputStreamReader(m.getInputStream(), StandardCharsets.UTF_8))
                    .readLine();
            assertTrue(line != null, "memserver printed nothing; log:\n" + Files.readString(log));
            Matcher matcher = LENDING.matcher(line);
            assertTrue(matcher.find(), line);
            address = matcher.group(1);

            try (RemoteConnection c = new TcpProvider().connect(new ConnectParams()
                    .address(Endpoints.parse(address, 0)).token("t").clientName("mem-test"));
                    Arena arena = Arena.ofShared()) {
                RegionDescriptor r = c.allocate(RegionTag.scratch("test"), 1 << 20).get(10, TimeUnit.SECONDS);
                RegionDescriptor tagged = c.allocate(new RegionTag("vol-a", 3, 1, 7), 64 << 10)
                        .get(10, TimeUnit.SECONDS);
                String id = Long.toString(r.id());

                // --hex at a size-suffixed offset; checked through this JVM's connection, one byte either side
                Run wrote = mem("write", "--region", id, "--offset", "4K", "--hex", "de ad be ef 00 41").ok();
                assertEquals("wrote 6 bytes to region " + id + " at offset 4096\n", wrote.text());
                MemorySegment around = arena.allocate(8);
                c.read(r, 4095, around).get(10, TimeUnit.SECONDS);
                assertArrayEquals(HexFormat.of().parseHex("00deadbeef004100"), around.toArray(ValueLayout.JAVA_BYTE));
                Path small = dir.resolve("small.bin");
                mem("read", "--region", id, "--offset", "4096", "--length", "6", "--file", small.toString()).ok();
                assertArrayEquals(HexFormat.of().parseHex("deadbeef0041"), Files.readAllBytes(small));

                // 100 KiB of random bytes: written from a file, read back into a file and to stdout (a pipe: raw)
                byte[] random = new byte[100 << 10];
                new Random(7).nextBytes(random);
                Path in = Files.write(dir.resolve("random.bin"), random);
                Path back = dir.resolve("back.bin");
                assertEquals("wrote 102400 bytes to region " + id + " at offset 65536\n",
                        mem("write", "--region", id, "--offset", "64K", "--file", in.toString()).ok().text());
                mem("read", "--region", id, "--offset", "64K", "--length", "100K", "--file", back.toString()).ok();
                assertArrayEquals(random, Files.readAllBytes(back));
                assertArrayEquals(random, mem("read", "--region", id, "--offset", "65536", "--length", "102400")
                        .ok().out());
                MemorySegment direct = arena.allocate(random.length);
                c.read(r, 64 << 10, direct).get(10, TimeUnit.SECONDS);
                assertArrayEquals(random, direct.toArray(ValueLayout.JAVA_BYTE));

                // --pattern, then a hexdump from 16 bytes before it to 16 bytes after (the region starts zeroed)
                assertEquals("wrote 100 bytes to region " + id + " at offset 524288\n",
                        mem("write", "--region", id, "--offset", "512K", "--pattern", "0x41", "--length", "100")
                                .ok().text());
                String zeros = "00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00";
                String as = "41 41 41 41 41 41 41 41  41 41 41 41 41 41 41 41";
                assertEquals(String.join("\n",
                        "0007fff0  " + zeros + "  |................|",
                        "00080000  " + as + "  |AAAAAAAAAAAAAAAA|",
                        "*",
                        "00080060  41 41 41 41 00 00 00 00  00 00 00 00 00 00 00 00  |AAAA............|",
                        "00080070  00 00 00 00                                       |....|",
                        "00080074", ""),
                        mem("read", "--region", id, "--offset", "524272", "--length", "132", "--hex").ok().text());

                // list: both regions with their tags and owner, every column starting under its heading
                List<String> lines = mem("list").ok().text().lines().toList();
                assertEquals(3, lines.size(), String.join("\n", lines));
                String header = lines.get(0);
                String[] headings = {"ID", "LENGTH", "VOLUME", "SLAB", "REPLICA", "GENERATION", "OWNER"};
                assertRow(header, headings, lines.get(1), id, "1MiB", "test", "0", "0", "0", "mem-test");
                assertRow(header, headings, lines.get(2), Long.toString(tagged.id()), "64KiB", "vol-a", "3", "1", "7",
                        "mem-test");

                // failures, in parallel: one line and exit 1 for what the memserver refuses, usage and exit 2
                // for bad arguments; nothing on stdout. The 5 MiB region takes transfers of several chunks whose
                // first chunks fit: none of them may be printed or written before the range is refused.
                RegionDescriptor five = c.allocate(RegionTag.scratch("five"), 5 << 20).get(10, TimeUnit.SECONDS);
                String fiveId = Long.toString(five.id());
                List<Running> failing = List.of(
                        start("read", "--region", id, "--offset", "1048568", "--length", "16", "--hex"),
                        start("write", "--region", id, "--offset", "1M", "--hex", "00"),
                        start("read", "--region", fiveId, "--offset", "1M", "--length", "5M"),
                        start("write", "--region", fiveId, "--offset", "1M", "--pattern", "0xff", "--length", "5M"),
                        start("read", "--region", "999999", "--length", "16"),
                        start("read", "--length", "16"),
                        start("write", "--region", id, "--hex", "abc"));
                List<Run> runs = new ArrayList<>();
                for (Running f : failing) {
                    runs.add(f.finish());
                }
                runs.get(0).failed("range 1048568+16 is outside region " + id + " (1048576 bytes)");
                runs.get(1).failed("range 1048576+1 is outside region " + id + " (1048576 bytes)");
                runs.get(2).failed("range 1048576+5242880 is outside region " + fiveId + " (5242880 bytes)");
                runs.get(3).failed("range 1048576+5242880 is outside region " + fiveId + " (5242880 bytes)");
                runs.get(4).failed("no region 999999");
                runs.get(5).usage("Missing required option: '--region=ID'");
                runs.get(6).usage("--hex 'abc' is not hex bytes");

                // the refused writes changed nothing
                MemorySegment last = arena.allocate(8);
                c.read(r, (1 << 20) - 8, last).get(10, TimeUnit.SECONDS);
                assertArrayEquals(new byte[8], last.toArray(ValueLayout.JAVA_BYTE));
                MemorySegment untouched = arena.allocate(4 << 20);
                c.read(five, 1 << 20, untouched).get(10, TimeUnit.SECONDS);
                assertEquals(-1, untouched.mismatch(arena.allocate(4 << 20)), "a refused write wrote a part");
            }

            m.destroy();
            assertTrue(m.waitFor(30, TimeUnit.SECONDS), "memserver did not stop on SIGTERM");
        } finally {
            m.destroyForcibly();
        }
    }

    /** Each value starts exactly where its heading does, preceded by a space (or the line start). */
    private static void assertRow(String header, String[] headings, String row, String... values) {
        int from = 0;
        for (int i = 0; i < headings.length; i++) {
            int at = header.indexOf(headings[i], from);
            assertTrue(at >= 0, header);
            assertTrue(row.length() > at && (at == 0 || row.charAt(at - 1) == ' '), header + "\n" + row);
            String value = row.substring(at).split(" ", 2)[0];
            assertEquals(values[i], value, "column " + headings[i] + ":\n" + header + "\n" + row);
            from = at + headings[i].length();
        }
    }

    private Run mem(String... args) throws Exception {
        return start(args).finish();
    }

    private Running start(String... args) throws Exception {
        List<String> all = new ArrayList<>(List.of("mem", args[0], "--server", address, "--token-file",
                dir.resolve("token").toString()));
        all.addAll(List.of(args).subList(1, args.length));
        Path log = Files.createTempFile(dir, "mem-", ".log");
        Process p = CliProcess.start(log, all.toArray(String[]::new));
        p.getOutputStream().close();
        CompletableFuture<byte[]> out = CompletableFuture.supplyAsync(() -> {
            try {
                return p.getInputStream().readAllBytes();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        });
        return new Running(String.join(" ", all), p, out, log);
    }

    private record Running(String command, Process process, CompletableFuture<byte[]> out, Path log) {
        Run finish() throws Exception {
            assertTrue(process.waitFor(30, TimeUnit.SECONDS), command + " did not finish");
            return new Run(command, process.exitValue(), out.get(10, TimeUnit.SECONDS), Files.readString(log));
        }
    }

    private record Run(String command, int exit, byte[] out, String err) {
        String text() {
            return new String(out, StandardCharsets.UTF_8);
        }

        Run ok() {
            assertEquals(0, exit, command + "\nstderr: " + err);
            assertEquals("", err, command);
            return this;
        }

        /** Exit 1 with exactly one line on stderr, {@code mem: ...} containing the given words. */
        void failed(String words) {
            assertEquals(1, exit, command + "\nstderr: " + err);
            assertEquals(0, out.length, command + "\nstdout began: " + text().substring(0, Math.min(200, out.length)));
            assertEquals(1, err.lines().count(), command + "\nstderr: " + err);
            assertTrue(err.startsWith("mem: ") && err.contains(words), command + "\nstderr: " + err);
        }

        /** Exit 2, the reason first and then where the subcommand's help is (not the whole usage). */
        void usage(String reason) {
            assertEquals(2, exit, command + "\nstderr: " + err);
            assertEquals(0, out.length, command + "\nstdout began: " + text().substring(0, Math.min(200, out.length)));
            assertTrue(err.startsWith(reason) && err.contains("Try 'rbridge mem ") && !err.contains("Usage:"),
                    command + "\nstderr: " + err);
        }
    }
}
