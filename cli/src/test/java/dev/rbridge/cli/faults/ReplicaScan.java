package dev.rbridge.cli.faults;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.tcp.TcpProvider;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * Reads every replica of every slab of a volume straight from the memservers, as the project's own memserver client
 * does (LIST, OPEN, READ over tcp), and compares each byte with what one {@link BlockPattern} wrote: a read through a
 * bridge sees one replica only, this sees them all. Needs the volume unleased (no bridge serving it), since OPEN is
 * refused while another connection holds the lease.
 *
 * <p>Only the newest generation of each slab counts: that is what a bridge attaching the volume would serve (older
 * ones it releases). The manifest regions (slab {@code -1}) are not data.
 */
final class ReplicaScan {
    private static final int CHUNK = 1 << 20;
    private static final Duration OP_TIMEOUT = Duration.ofSeconds(30);

    /** Something found that is not the expected writer's data, or a slab without its replicas. */
    record Finding(String memserver, long slab, int replica, long offset, long length, String found) {
        @Override
        public String toString() {
            return "memserver " + memserver + " slab " + slab + " replica " + replica + " volume offset " + offset
                    + " (+" + length + " bytes): " + found;
        }
    }

    private record Placed(String memserver, int index, RegionInfo region) {
    }

    private ReplicaScan() {}

    /**
     * Every difference between the replicas of {@code volume} ({@code size} bytes in slabs of {@code slabSize}, each
     * on {@code replicas} memservers) on {@code memservers} and {@code expected}'s pattern; empty when every replica
     * of every slab is byte for byte the expected writer's data.
     */
    static List<Finding> scan(List<String> memservers, String token, String volume, long size, long slabSize,
            int replicas, BlockPattern expected) throws Exception {
        List<Finding> findings = new ArrayList<>();
        List<RemoteConnection> connections = new ArrayList<>();
        try (Arena arena = Arena.ofShared()) {
            Map<Long, List<Placed>> slabs = new TreeMap<>();
            for (int i = 0; i < memservers.size(); i++) {
                String address = memservers.get(i);
                int colon = address.lastIndexOf(':');
                RemoteConnection c = new TcpProvider().connect(new ConnectParams().address(new InetSocketAddress(
                        address.substring(0, colon), Integer.parseInt(address.substring(colon + 1)))).token(token)
                        .clientName("replica-scan").operationTimeout(OP_TIMEOUT));
                connections.add(c);
                for (RegionInfo r : get(c.list())) {
                    RegionTag tag = r.descriptor().tag();
                    if (tag.volume().equals(volume) && tag.slab() >= 0) {
                        slabs.computeIfAbsent(tag.slab(), k -> new ArrayList<>()).add(new Placed(address, i, r));
                    }
                }
            }
            MemorySegment buffer = arena.allocate(CHUNK, 4096);
            byte[] found = new byte[CHUNK];
            byte[] want = new byte[CHUNK];
            long slabCount = (size + slabSize - 1) / slabSize;
            for (long slab = 0; slab < slabCount; slab++) {
                List<Placed> all = slabs.getOrDefault(slab, List.of());
                long newest = all.stream().mapToLong(p -> p.region().descriptor().tag().generation()).max().orElse(-1);
                List<Placed> current = all.stream()
                        .filter(p -> p.region().descriptor().tag().generation() == newest).toList();
                long length = Math.min(slabSize, size - slab * slabSize);
                if (current.size() != replicas || current.stream().map(Placed::memserver).distinct().count()
                        != replicas) {
                    findings.add(new Finding("-", slab, -1, slab * slabSize, length, current.size()
                            + " replicas of generation " + newest + " where " + replicas + " on distinct memservers"
                            + " were expected: " + current));
                }
                for (Placed p : current) {
                    RemoteConnection c = connections.get(p.index());
                    RegionDescriptor d = get(c.open(p.region().descriptor().id()));
                    if (d.length() != length) {
                        findings.add(new Finding(p.memserver(), slab, d.tag().replica(), slab * slabSize, length,
                                "region " + d.id() + " has " + d.length() + " bytes"));
                        continue;
                    }
                    for (long at = 0; at < length; at += CHUNK) {
                        int n = (int) Math.min(CHUNK, length - at);
                        MemorySegment part = buffer.asSlice(0, n);
                        get(c.read(d, at, part));
                        MemorySegment.copy(part, ValueLayout.JAVA_BYTE, 0, found, 0, n);
                        long from = slab * slabSize + at;
                        expected.fill(from, want, n);
                        if (Arrays.mismatch(found, 0, n, want, 0, n) >= 0) {
                            compare(p.memserver(), slab, d.tag().replica(), from, found, want, n, findings);
                        }
                    }
                }
            }
        } finally {
            connections.forEach(RemoteConnection::close);
        }
        return findings;
    }

    /** Adds one finding per run of consecutive differing cells that hold the same writer's block (or zeroes). */
    private static void compare(String memserver, long slab, int replica, long from, byte[] found, byte[] want, int n,
            List<Finding> findings) {
        ByteBuffer f = ByteBuffer.wrap(found, 0, n).order(ByteOrder.LITTLE_ENDIAN);
        long runStart = -1;
        String runWhat = null;
        for (int at = 0; at <= n; at += BlockPattern.CELL) {
            String what = null;
            if (at < n && Arrays.mismatch(found, at, at + BlockPattern.CELL, want, at, at + BlockPattern.CELL) >= 0) {
                what = BlockPattern.describe(f.getLong(at), f.getLong(at + 8), from + at);
            }
            if (runWhat != null && !runWhat.equals(what)) {
                findings.add(new Finding(memserver, slab, replica, runStart, from + at - runStart, runWhat));
                runWhat = null;
            }
            if (what != null && runWhat == null) {
                runStart = from + at;
                runWhat = what;
            }
        }
    }

    private static <T> T get(CompletableFuture<T> f) throws Exception {
        return f.get(OP_TIMEOUT.toSeconds() + 5, TimeUnit.SECONDS);
    }
}
