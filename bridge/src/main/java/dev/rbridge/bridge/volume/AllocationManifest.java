package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Which slabs of a volume were ever allocated, kept as a bitmap in a small region (tagged slab {@value #SLAB}) on
 * every memserver the bridge uses. Without it a restarted bridge could not tell a slab that was never written (reads
 * as zeroes) from one whose every replica was lost (must fail with EIO): it would silently serve zeroes in place of
 * data. A slab's bit is written to every reachable copy before its first write is acknowledged; bits are never
 * cleared while the volume exists.
 */
public final class AllocationManifest {
    private static final Logger log = LoggerFactory.getLogger(AllocationManifest.class);
    /** The slab number in a manifest region's tag. */
    public static final long SLAB = -1;

    private final String volume;
    /** Replaced (longer, under the lock) when the volume grows within {@link #regionLength}. */
    private long[] bits;
    /** Slabs the volume has: bits at or past it (a volume that was larger, then shrunk) are never taken in. */
    private int slabs;
    private final Map<MemserverLink, Copy> copies = new ConcurrentHashMap<>();

    private record Copy(RemoteConnection connection, RegionDescriptor region) {
    }

    public AllocationManifest(String volume, int slabs) {
        this.volume = volume;
        this.bits = new long[words(slabs)];
        this.slabs = slabs;
    }

    /** Bytes of the manifest region. */
    public synchronized long regionLength() {
        return regionLength(bits.length);
    }

    /** Words of a bitmap of {@code slabs} bits (up to Integer.MAX_VALUE: counted in long, no overflow). */
    private static int words(int slabs) {
        return (int) ((slabs + 63L) / 64);
    }

    private static long regionLength(int words) {
        return Math.max(4096, ((long) words * 8 + 4095) & -4096L);
    }

    /**
     * Makes room for {@code slabs} slabs (new ones unallocated) when that fits the regions the copies already have;
     * false when it would need larger regions.
     */
    public synchronized boolean growTo(int slabs) {
        if (slabs < 0) {
            throw new IllegalArgumentException("a volume of " + slabs + " slabs");
        }
        int words = words(slabs);
        if (regionLength(words) > regionLength(bits.length)) {
            return false;
        }
        if (words > bits.length) {
            bits = java.util.Arrays.copyOf(bits, words);
        }
        this.slabs = Math.max(this.slabs, slabs);
        return true;
    }

    public static RegionTag tag(String volume) {
        return new RegionTag(volume, SLAB, 0, 1);
    }

    public static boolean isManifest(RegionTag tag) {
        return tag.slab() == SLAB;
    }

    public synchronized boolean allocated(int slab) {
        return (bits[slab >>> 6] & (1L << slab)) != 0;
    }

    /** At start: ORs in what one memserver's copy says. */
    public void merge(RemoteConnection c, RegionDescriptor region) throws Exception {
        int words;
        synchronized (this) {
            words = bits.length;
        }
        ByteBuffer b = ByteBuffer.allocateDirect((int) Math.min(region.length(), (long) words * 8));
        if (b.capacity() > 0) {
            c.read(region, 0, MemorySegment.ofBuffer(b)).get();
        }
        b.order(ByteOrder.LITTLE_ENDIAN);
        synchronized (this) {
            for (int i = 0; i < b.capacity() / 8 && i < bits.length; i++) {
                long word = b.getLong(i * 8);
                int past = slabs - i * 64; // bits of this word that are slabs of the volume
                bits[i] |= past >= 64 ? word : past <= 0 ? 0 : word & ((1L << past) - 1);
            }
        }
    }

    /** Makes {@code region} this memserver's copy and writes the whole bitmap into it. */
    public synchronized CompletableFuture<Void> adopt(MemserverLink link, RemoteConnection c, RegionDescriptor region) {
        // Issued under the lock, like record's: a connection applies writes in the order they were issued, so an
        // older snapshot can never land after a newer bit.
        copies.put(link, new Copy(c, region));
        // The whole region: words past the bitmap are zeroed, so a bit left from when the volume was larger never
        // comes back when it grows again.
        ByteBuffer b = ByteBuffer.allocateDirect((int) Math.max(region.length(), (long) bits.length * 8))
                .order(ByteOrder.LITTLE_ENDIAN);
        for (long w : bits) {
            b.putLong(w);
        }
        b.clear();
        return b.remaining() == 0 ? CompletableFuture.completedFuture(null)
                : c.write(region, 0, MemorySegment.ofBuffer(b));
    }

    public void forget(MemserverLink link) {
        copies.remove(link);
    }

    /**
     * Records that {@code slab} has memory now. Completes when every reachable copy has the bit, or fails if none
     * could be written (then the slab must not be used: after a restart nobody would know it held data).
     */
    public CompletableFuture<Void> record(int slab) {
        int word = slab >>> 6;
        List<CompletableFuture<Void>> writes = new ArrayList<>();
        synchronized (this) {
            bits[word] |= 1L << slab;
            long value = bits[word];
            for (Copy copy : copies.values()) {
                if (!copy.connection.isOpen()) {
                    continue;
                }
                ByteBuffer b = ByteBuffer.allocateDirect(8).order(ByteOrder.LITTLE_ENDIAN).putLong(0, value);
                writes.add(copy.connection.write(copy.region, (long) word * 8, MemorySegment.ofBuffer(b)));
            }
        }
        if (writes.isEmpty()) {
            return CompletableFuture.failedFuture(new IllegalStateException("no memserver holds the allocation "
                    + "manifest of volume " + volume));
        }
        CompletableFuture<Void> result = new CompletableFuture<>();
        CompletableFuture.allOf(writes.toArray(CompletableFuture[]::new)).whenComplete((v, e) -> {
            long ok = writes.stream().filter(f -> !f.isCompletedExceptionally()).count();
            if (ok > 0) {
                if (e != null) {
                    log.debug("volume {}: manifest written to {} of {} memservers", volume, ok, writes.size());
                }
                result.complete(null);
            } else {
                result.completeExceptionally(e);
            }
        });
        return result;
    }
}
