package dev.rbridge.cli.partition;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.tcp.TcpProvider;

import java.io.IOException;
import java.io.PrintStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * Compares the replicas of a volume straight from the memservers, in a {@link PartitionLab} node as a JVM of its own
 * ({@code java -cp TEST_CLASSPATH dev.rbridge.cli.partition.ReplicaCompare TOKEN_FILE VOLUME ADDRESS...}): a read
 * through a bridge sees one replica of a slab, this reads them all, as the project's memserver client does (LIST, OPEN,
 * READ over tcp). Only the newest generation of each slab counts (what a bridge attaching the volume serves; it
 * releases older ones); manifest regions (slab -1) are not data. Needs the volume unleased: no bridge serving it.
 *
 * <p>Prints one line per slab, {@code slab S generation G on ADDRESS,ADDRESS same} or {@code ... differ at byte N}
 * (the first byte of the slab where two replicas differ), then {@code done}; {@code error ...} if it cannot read.
 * {@link #run} starts one and returns the lines.
 */
public final class ReplicaCompare {
    private static final int CHUNK = 1 << 20;
    private static final Duration OP_TIMEOUT = Duration.ofSeconds(20);

    private record Placed(RemoteConnection connection, String memserver, RegionInfo region) {
    }

    private ReplicaCompare() {}

    public static void main(String[] args) {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        try {
            compare(Files.readString(Path.of(args[0])).strip(), args[1], List.of(args).subList(2, args.length), out);
            out.println("done");
        } catch (Exception e) {
            out.println(("error " + e).replace('\n', ' '));
        }
        System.exit(0);
    }

    private static void compare(String token, String volume, List<String> memservers, PrintStream out)
            throws Exception {
        List<RemoteConnection> connections = new ArrayList<>();
        try (Arena arena = Arena.ofShared()) {
            Map<Long, List<Placed>> slabs = new TreeMap<>();
            for (String address : memservers) {
                int colon = address.lastIndexOf(':');
                RemoteConnection c = new TcpProvider().connect(new ConnectParams().address(new InetSocketAddress(
                        address.substring(0, colon), Integer.parseInt(address.substring(colon + 1)))).token(token)
                        .clientName("replica-compare").operationTimeout(OP_TIMEOUT));
                connections.add(c);
                for (RegionInfo r : get(c.list())) {
                    RegionTag tag = r.descriptor().tag();
                    if (tag.volume().equals(volume) && tag.slab() >= 0) {
                        slabs.computeIfAbsent(tag.slab(), k -> new ArrayList<>()).add(new Placed(c, address, r));
                    }
                }
            }
            MemorySegment buffer = arena.allocate(CHUNK, 4096);
            for (Map.Entry<Long, List<Placed>> e : slabs.entrySet()) {
                long newest = e.getValue().stream().mapToLong(p -> p.region().descriptor().tag().generation()).max()
                        .orElseThrow();
                List<Placed> current = e.getValue().stream()
                        .filter(p -> p.region().descriptor().tag().generation() == newest).toList();
                List<RegionDescriptor> opened = new ArrayList<>();
                for (Placed p : current) {
                    opened.add(get(p.connection().open(p.region().descriptor().id())));
                }
                String where = "slab " + e.getKey() + " generation " + newest + " on "
                        + String.join(",", current.stream().map(Placed::memserver).toList());
                out.println(where + " " + firstDifference(current, opened, buffer));
            }
        } finally {
            connections.forEach(RemoteConnection::close);
        }
    }

    /** {@code same}, or {@code differ at byte N} / {@code differ in length}. */
    private static String firstDifference(List<Placed> current, List<RegionDescriptor> opened, MemorySegment buffer)
            throws Exception {
        long length = opened.getFirst().length();
        for (RegionDescriptor d : opened) {
            if (d.length() != length) {
                return "differ in length: " + opened.stream().map(RegionDescriptor::length).toList();
            }
        }
        byte[] first = new byte[CHUNK];
        byte[] other = new byte[CHUNK];
        for (long at = 0; at < length; at += CHUNK) {
            int n = (int) Math.min(CHUNK, length - at);
            for (int i = 0; i < opened.size(); i++) {
                MemorySegment part = buffer.asSlice(0, n);
                get(current.get(i).connection().read(opened.get(i), at, part));
                MemorySegment.copy(part, ValueLayout.JAVA_BYTE, 0, i == 0 ? first : other, 0, n);
                int m = i == 0 ? -1 : Arrays.mismatch(first, 0, n, other, 0, n);
                if (m >= 0) {
                    return "differ at byte " + (at + m);
                }
            }
        }
        return "same";
    }

    private static <T> T get(CompletableFuture<T> f) throws Exception {
        return f.get(OP_TIMEOUT.toSeconds() + 5, TimeUnit.SECONDS);
    }

    /**
     * Runs one in {@code node} over {@code memservers} and returns its slab lines; throws if it failed or did not end
     * within a minute.
     */
    static List<String> run(PartitionLab lab, String node, Path tokenFile, String volume, List<LabRbridge> memservers)
            throws IOException, InterruptedException {
        List<String> jvm = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-XX:+UseSerialGC", "-Xmx128m", "-cp",
                System.getProperty("java.class.path"), ReplicaCompare.class.getName(), tokenFile.toString(), volume));
        memservers.forEach(m -> jvm.add(m.address()));
        Process p = lab.start(new ProcessBuilder(lab.command(node, jvm))
                .redirectError(lab.logDir().resolve("replica-compare.log").toFile()));
        List<String> lines = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).lines().toList();
        if (!p.waitFor(60, TimeUnit.SECONDS) || lines.isEmpty() || !lines.getLast().equals("done")) {
            p.destroyForcibly();
            throw new IllegalStateException("replica compare in " + node + " failed: " + lines + " (log in "
                    + lab.logDir() + ")");
        }
        return lines.subList(0, lines.size() - 1);
    }
}
