package dev.rbridge.cli;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.RemoteMemoryProvider;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.io.Console;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.FilterOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AccessDeniedException;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * {@code rbridge mem}: look into a memserver's regions. {@code read} dumps a range (raw or as {@code hexdump -C}),
 * {@code write} stores bytes from a file, a hex string or a repeated byte, {@code list} shows the regions.
 */
@Command(name = "mem",
        mixinStandardHelpOptions = true,
        description = {"Inspect a memserver's regions: list them, read a range, write bytes into one.",
                "Exits 1 with one line on stderr when an operation fails (unknown region, range",
                "outside the region, memserver unreachable), 2 on bad arguments."},
        subcommands = {MemCommand.Read.class, MemCommand.Write.class, MemCommand.ListRegions.class},
        footer = {"", "Examples:",
                "  rbridge mem list  " + MemCommand.SERVER + " --token-file /etc/rbridge/token",
                "  rbridge mem read  " + MemCommand.SERVER + " --token-file /etc/rbridge/token \\",
                "      --region 3 --length 256 --hex",
                "  rbridge mem write " + MemCommand.SERVER + " --token-file /etc/rbridge/token \\",
                "      --region 3 --hex 'de ad be ef'"})
final class MemCommand {
    /** The memserver the examples talk to. */
    static final String SERVER = "--server mem1:" + Defaults.MEMSERVER_PORT;

    /** Bytes moved per operation; a multiple of 16 so hexdump lines never straddle two. */
    static final int CHUNK = 4 << 20;

    /** The start of the examples of read and write: the memserver, its token, region 3. */
    private static final String ON_REGION = SERVER + " --token-file /etc/rbridge/token --region 3 \\";

    /**
     * What read and write share: the memserver, which region and where in it; {@link #onRange} opens the region and
     * checks the range before they move a byte.
     */
    abstract static class RegionRange implements Callable<Integer> {
        @Mixin
        MemserverClientOptions remote;

        @Option(names = "--region", paramLabel = "ID", required = true, description = "The region (see mem list).")
        long region;

        @Option(names = "--offset", paramLabel = "OFFSET", defaultValue = "0",
                description = "Where to start in the region, e.g. 4K. Default ${DEFAULT-VALUE}.")
        String offset;

        @CommandLine.Spec
        CommandLine.Model.CommandSpec spec;

        /** {@code --offset} in bytes, or ParameterException. */
        long offsetBytes() {
            return size(spec, "--offset", offset);
        }

        /**
         * Connects, opens the region, checks that the {@code n} bytes at {@code at} lie in it and runs {@code move}
         * on them; the exit code, every failure one {@code mem: ...} line and 1.
         */
        int onRange(long at, long n, Move move) {
            return connected(spec, remote, (c, w, out) -> {
                RegionDescriptor d = w.await(c.open(region));
                checkRange(d, at, n);
                return move.run(c, w, d, out);
            });
        }
    }

    /** What a subcommand does once connected; returns the exit code. */
    private interface Action {
        int run(RemoteConnection c, Waiter w, PrintWriter out) throws RemoteMemoryException, IOException;
    }

    /** What read or write does with the region once it is open and the range checked; returns the exit code. */
    private interface Move {
        int run(RemoteConnection c, Waiter w, RegionDescriptor d, PrintWriter out)
                throws RemoteMemoryException, IOException;
    }

    /** Waits for futures no longer than {@code seconds}, unwrapping failures to their cause. */
    private record Waiter(long seconds) {
        <T> T await(CompletableFuture<T> f) throws RemoteMemoryException {
            try {
                return f.get(seconds, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                Throwable cause = e.getCause();
                if (cause instanceof RemoteMemoryException r) {
                    throw r;
                }
                throw new RemoteMemoryException(Status.INTERNAL, String.valueOf(cause == null ? e : cause.getMessage()),
                        e);
            } catch (TimeoutException e) {
                throw new RemoteMemoryException(Status.TIMEOUT, "no answer from the memserver within "
                        + seconds + " s");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new RemoteMemoryException(Status.INTERNAL, "interrupted");
            }
        }
    }

    /** Connects, runs the action, and turns every failure into one {@code mem: ...} line and exit code 1. */
    private static int connected(CommandLine.Model.CommandSpec spec, MemserverClientOptions remote, Action action) {
        ConnectParams params;
        RemoteMemoryProvider provider;
        try {
            params = remote.params("rbridge-mem");
            provider = remote.provider();
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        PrintWriter out = spec.commandLine().getOut();
        PrintWriter err = spec.commandLine().getErr();
        try (RemoteConnection c = provider.connect(params)) {
            return action.run(c, new Waiter(remote.answerWaitSeconds()), out);
        } catch (RemoteMemoryException e) {
            err.println("mem: " + e.getMessage());
            return 1;
        } catch (IOException e) {
            err.println("mem: " + (e.getMessage() == null ? e.toString() : e.getMessage()));
            return 1;
        } finally {
            out.flush();
            err.flush();
        }
    }

    /** A size option (4096, 4K, 1M...) or ParameterException naming the option. */
    private static long size(CommandLine.Model.CommandSpec spec, String option, String text) {
        try {
            return Sizes.parse(text);
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), option + ": " + e.getMessage());
        }
    }

    /** An I/O failure in words: the JDK's file exceptions carry only the path as their message. */
    private static String why(IOException e) {
        if (e instanceof NoSuchFileException) {
            return "no such file or directory";
        }
        if (e instanceof AccessDeniedException) {
            return "permission denied";
        }
        if (e instanceof FileSystemException f && f.getReason() != null) {
            return f.getReason();
        }
        return e.getMessage() == null ? e.toString() : e.getMessage();
    }

    /**
     * A transfer of several chunks is checked against the region before the first one, so a bad range neither
     * prints nor writes a part of it; a single chunk goes straight to the memserver, which answers the same way.
     */
    private static void checkRange(RegionDescriptor d, long offset, long length) throws RemoteMemoryException {
        if (length > CHUNK && (offset > d.length() || length > d.length() - offset)) {
            throw new RemoteMemoryException(Status.OUT_OF_RANGE, "range " + offset + "+" + length
                    + " is outside region " + d.id() + " (" + d.length() + " bytes)");
        }
    }

    // ------------------------------------------------------------------------------------------------------ read

    @Command(name = "read",
            mixinStandardHelpOptions = true,
            description = {"Read a range of a region: raw bytes to --file or stdout, or a hexdump (--hex).",
                    "The hexdump is hexdump -C style; its offset column is the offset in the region.",
                    "Without --file or --hex: a hexdump when stdout is a terminal, raw bytes otherwise."},
            footer = {"", "Examples:",
                    "  rbridge mem read " + ON_REGION,
                    "      --length 64 --hex",
                    "  rbridge mem read " + ON_REGION,
                    "      --offset 1M --length 16M --file region3.bin"})
    static final class Read extends RegionRange {
        @Option(names = "--length", paramLabel = "LENGTH", required = true,
                description = "Bytes to read, e.g. 512 or 1M.")
        String length;

        @Option(names = "--file", paramLabel = "FILE", description = "Write the bytes to FILE (created or replaced).")
        Path file;

        @Option(names = "--hex", description = "Print a hexdump instead of raw bytes.")
        boolean hex;

        @Override
        public Integer call() {
            long at = offsetBytes();
            long n = size(spec, "--length", length);
            if (n <= 0) {
                throw new CommandLine.ParameterException(spec.commandLine(), "--length must be positive");
            }
            if (file != null && hex) {
                throw new CommandLine.ParameterException(spec.commandLine(), "give --file or --hex, not both");
            }
            Console console = System.console();
            boolean dump = hex || (file == null && console != null && console.isTerminal());
            return onRange(at, n, (c, w, d, out) -> {
                // stdout as a plain stream, not picocli's writer: a closed pipe must stop the read, not be ignored
                try (Arena arena = Arena.ofShared();
                        OutputStream sink = file != null ? Files.newOutputStream(file)
                                : new NonClosing(new FileOutputStream(FileDescriptor.out))) {
                    MemorySegment buffer = arena.allocate(Math.min(n, CHUNK));
                    HexDump h = dump ? new HexDump(at) : null;
                    byte[] bytes = dump ? null : new byte[(int) buffer.byteSize()];
                    for (long done = 0; done < n;) {
                        int len = (int) Math.min(CHUNK, n - done);
                        MemorySegment part = buffer.asSlice(0, len);
                        w.await(c.read(d, at + done, part));
                        if (dump) {
                            sink.write(h.lines(part).getBytes(StandardCharsets.US_ASCII));
                        } else {
                            MemorySegment.copy(part, ValueLayout.JAVA_BYTE, 0, bytes, 0, len);
                            sink.write(bytes, 0, len);
                        }
                        done += len;
                    }
                    if (dump) {
                        sink.write(h.end().getBytes(StandardCharsets.US_ASCII));
                    }
                } catch (IOException e) {
                    throw new IOException("cannot write " + (file != null ? file : "to stdout") + ": " + why(e), e);
                }
                return 0;
            });
        }
    }

    /** Stdout must stay open for picocli's own writers. */
    private static final class NonClosing extends FilterOutputStream {
        NonClosing(OutputStream out) {
            super(out);
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            out.write(b, off, len);
        }

        @Override
        public void close() throws IOException {
            flush();
        }
    }

    /**
     * {@code hexdump -C} output for bytes starting at a region offset: 16 bytes per line in two groups of 8, the
     * printable ASCII between bars, runs of identical lines shown as one {@code *}, and the end offset last. Fed in
     * pieces whose lengths are multiples of 16 except the last.
     */
    static final class HexDump {
        private static final char[] DIGITS = "0123456789abcdef".toCharArray();
        private long position;
        private final byte[] previous = new byte[16];
        private boolean hasPrevious;
        private boolean starred;

        HexDump(long start) {
            this.position = start;
        }

        String lines(MemorySegment data) {
            StringBuilder sb = new StringBuilder();
            byte[] line = new byte[16];
            for (long i = 0; i < data.byteSize(); i += 16) {
                int len = (int) Math.min(16, data.byteSize() - i);
                MemorySegment.copy(data, ValueLayout.JAVA_BYTE, i, line, 0, len);
                if (len == 16 && hasPrevious && Arrays.equals(line, previous)) {
                    if (!starred) {
                        sb.append("*\n");
                        starred = true;
                    }
                } else {
                    line(sb, line, len);
                    starred = false;
                }
                System.arraycopy(line, 0, previous, 0, 16);
                hasPrevious = len == 16;
                position += len;
            }
            return sb.toString();
        }

        /** The closing line: the offset just past the last byte. */
        String end() {
            return String.format("%08x", position) + "\n";
        }

        private void line(StringBuilder sb, byte[] line, int len) {
            sb.append(String.format("%08x", position)).append("  ");
            for (int j = 0; j < 16; j++) {
                if (j < len) {
                    sb.append(DIGITS[(line[j] >> 4) & 0xf]).append(DIGITS[line[j] & 0xf]).append(' ');
                } else {
                    sb.append("   ");
                }
                if (j == 7) {
                    sb.append(' ');
                }
            }
            sb.append(" |");
            for (int j = 0; j < len; j++) {
                sb.append(line[j] >= 0x20 && line[j] < 0x7f ? (char) line[j] : '.');
            }
            sb.append("|\n");
        }
    }

    // ----------------------------------------------------------------------------------------------------- write

    @Command(name = "write",
            mixinStandardHelpOptions = true,
            description = {"Write a file, hex bytes or a repeated byte into a region at OFFSET.",
                    "Give one of --file, --hex, or --pattern with --length.",
                    "Waits until the memserver holds the bytes, then says how many it wrote where."},
            footer = {"", "Examples:",
                    "  rbridge mem write " + ON_REGION,
                    "      --hex 'de ad be ef'",
                    "  rbridge mem write " + ON_REGION,
                    "      --offset 4K --pattern 0xff --length 64K",
                    "  rbridge mem write " + ON_REGION,
                    "      --file blob.bin"})
    static final class Write extends RegionRange {
        @Option(names = "--file", paramLabel = "FILE", description = "Write the contents of FILE.")
        Path file;

        @Option(names = "--hex", paramLabel = "HEX",
                description = "Write these bytes, e.g. 'de ad be ef' (spaces allowed).")
        String hex;

        @Option(names = "--pattern", paramLabel = "BYTE",
                description = "Write --length copies of BYTE (0-255 or 0x00-0xff).")
        String pattern;

        @Option(names = "--length", paramLabel = "LENGTH", description = "With --pattern: how many bytes, e.g. 64K.")
        String length;

        @Override
        public Integer call() {
            long at = offsetBytes();
            checkSources();
            byte[] bytes = hex != null ? parseHex(hex) : null;
            int fill = pattern != null ? parseByte(pattern) : 0;
            long n = byteCount(bytes);
            return onRange(at, n, (c, w, d, out) -> {
                try (Arena arena = Arena.ofShared()) {
                    MemorySegment buffer = arena.allocate(Math.max(1, Math.min(n, CHUNK)));
                    if (bytes != null) {
                        MemorySegment.copy(bytes, 0, buffer, ValueLayout.JAVA_BYTE, 0, bytes.length);
                        w.await(c.write(d, at, buffer.asSlice(0, n)));
                    } else if (pattern != null) {
                        buffer.fill((byte) fill);
                        for (long done = 0; done < n; done += CHUNK) {
                            w.await(c.write(d, at + done, buffer.asSlice(0, Math.min(CHUNK, n - done))));
                        }
                    } else {
                        copyFile(c, w, d, buffer, at, n);
                    }
                }
                w.await(c.flush());
                out.printf("wrote %d bytes to region %d at offset %d%n", n, d.id(), at);
                return 0;
            });
        }

        /** Exactly one source of bytes, and --length with --pattern only. */
        private void checkSources() {
            int sources = (file != null ? 1 : 0) + (hex != null ? 1 : 0) + (pattern != null ? 1 : 0);
            if (sources != 1) {
                throw new CommandLine.ParameterException(spec.commandLine(),
                        "give exactly one of --file, --hex or --pattern (with --length)");
            }
            if ((pattern != null) != (length != null)) {
                throw new CommandLine.ParameterException(spec.commandLine(), pattern != null
                        ? "--pattern needs --length"
                        : "--length goes with --pattern only");
            }
        }

        /** How many bytes to write: the --hex bytes, --length, or the size of --file (a regular file). */
        private long byteCount(byte[] bytes) {
            if (bytes != null) {
                return bytes.length;
            }
            if (pattern != null) {
                long n = size(spec, "--length", length);
                if (n <= 0) {
                    throw new CommandLine.ParameterException(spec.commandLine(), "--length must be positive");
                }
                return n;
            }
            try {
                var attributes = Files.readAttributes(file, BasicFileAttributes.class);
                if (!attributes.isRegularFile()) {
                    throw new IOException("not a regular file");
                }
                return attributes.size();
            } catch (IOException e) {
                throw new CommandLine.ParameterException(spec.commandLine(), "cannot read " + file + ": " + why(e));
            }
        }

        /** The first {@code n} bytes of --file into the region at {@code at}, a buffer at a time. */
        private void copyFile(RemoteConnection c, Waiter w, RegionDescriptor d, MemorySegment buffer, long at, long n)
                throws IOException, RemoteMemoryException {
            try (FileChannel in = FileChannel.open(file, StandardOpenOption.READ)) {
                for (long done = 0; done < n;) {
                    MemorySegment part = buffer.asSlice(0, Math.min(CHUNK, n - done));
                    var bb = part.asByteBuffer();
                    while (bb.hasRemaining()) {
                        if (in.read(bb) < 0) {
                            throw new IOException(file + " shrank to " + (done + bb.position())
                                    + " bytes while being written");
                        }
                    }
                    w.await(c.write(d, at + done, part));
                    done += part.byteSize();
                }
            } catch (IOException e) {
                throw new IOException("cannot read " + file + ": " + why(e), e);
            }
        }

        private byte[] parseHex(String text) {
            String t = text.replaceAll("\\s+", "");
            if (t.isEmpty() || t.length() % 2 != 0 || !t.matches("[0-9a-fA-F]*")) {
                throw new CommandLine.ParameterException(spec.commandLine(), "--hex '" + text
                        + "' is not hex bytes (pairs of hex digits, spaces allowed, e.g. 'de ad be ef')");
            }
            byte[] b = new byte[t.length() / 2];
            for (int i = 0; i < b.length; i++) {
                b[i] = (byte) Integer.parseInt(t, 2 * i, 2 * i + 2, 16);
            }
            return b;
        }

        private int parseByte(String text) {
            String t = text.trim();
            try {
                int v = t.regionMatches(true, 0, "0x", 0, 2) ? Integer.parseInt(t.substring(2), 16)
                        : Integer.parseInt(t);
                if (v >= 0 && v <= 255) {
                    return v;
                }
            } catch (NumberFormatException e) {
                // below
            }
            throw new CommandLine.ParameterException(spec.commandLine(), "--pattern '" + text
                    + "' is not a byte (0-255 or 0x00-0xff)");
        }
    }

    // ------------------------------------------------------------------------------------------------------ list

    @Command(name = "list",
            mixinStandardHelpOptions = true,
            description = {"List the memserver's regions: id, length, tag and owner.",
                    "The tag is what a region holds: volume, slab, replica and generation."},
            footer = {"", "Example:", "  rbridge mem list " + SERVER + " --token-file /etc/rbridge/token"})
    static final class ListRegions implements Callable<Integer> {
        @Mixin
        MemserverClientOptions remote;

        @CommandLine.Spec
        CommandLine.Model.CommandSpec spec;

        @Override
        public Integer call() {
            return connected(spec, remote, (c, w, out) -> {
                List<RegionInfo> regions = w.await(c.list());
                String[] header = {"ID", "LENGTH", "VOLUME", "SLAB", "REPLICA", "GENERATION", "OWNER"};
                List<String[]> rows = new ArrayList<>();
                rows.add(header);
                for (RegionInfo r : regions) {
                    RegionDescriptor d = r.descriptor();
                    rows.add(new String[]{Long.toString(d.id()), Sizes.format(d.length()), d.tag().volume(),
                            Long.toString(d.tag().slab()), Integer.toString(d.tag().replica()),
                            Long.toString(d.tag().generation()), r.owner()});
                }
                int[] width = new int[header.length];
                for (String[] row : rows) {
                    for (int i = 0; i < row.length; i++) {
                        width[i] = Math.max(width[i], row[i].length());
                    }
                }
                for (String[] row : rows) {
                    StringBuilder sb = new StringBuilder();
                    for (int i = 0; i < row.length; i++) {
                        sb.append(i == row.length - 1 ? row[i] : String.format("%-" + width[i] + "s  ", row[i]));
                    }
                    out.println(sb.toString().stripTrailing());
                }
                return 0;
            });
        }
    }
}
