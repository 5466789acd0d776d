package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.RemoteOpMetrics;
import dev.rbridge.common.Failures;
import dev.rbridge.common.splice.Pipe;
import dev.rbridge.nbd.device.Extent;
import dev.rbridge.nbd.protocol.Nbd;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;

import static dev.rbridge.bridge.volume.ReplicaOps.counted;

/**
 * The read side of a volume's data path: a request is cut at slab boundaries and each piece read from one live
 * replica (spread across them, hedged when small and replicated, read again from another replica if one fails), or
 * spliced to the client where the provider can. A slab never written reads as zeroes without a round trip.
 * BLOCK_STATUS is answered here too, from the slabs' zero maps.
 */
final class VolumeReads {
    private final Volume volume;

    VolumeReads(Volume volume) {
        this.volume = volume;
    }

    /** See {@link Volume#read}. */
    CompletableFuture<Void> read(long offset, ByteBuffer dst) {
        int length = dst.remaining();
        if (length == 0) {
            return CompletableFuture.completedFuture(null);
        }
        if (volume.fenced() != null) {
            return CompletableFuture.failedFuture(volume.fencedError());
        }
        MemorySegment seg = MemorySegment.ofBuffer(dst);
        Slab[] slabs = volume.slabs();
        int first = (int) (offset >>> volume.slabShift());
        int last = (int) ((offset + length - 1) >>> volume.slabShift());
        if (first == last) {
            return readSlab(slabs[first], offset - slabs[first].start, seg, 0);
        }
        CompletableFuture<?>[] parts = new CompletableFuture<?>[last - first + 1];
        for (int i = first; i <= last; i++) {
            Slab s = slabs[i];
            long from = Math.max(offset, s.start);
            long to = Math.min(offset + length, s.start + s.length);
            parts[i - first] = readSlab(s, from - s.start, seg.asSlice(from - offset, to - from), 0);
        }
        return CompletableFuture.allOf(parts);
    }

    /** The slab a READ would be spliced from: within one slab, one replica, not hedged, not resyncing; or null. */
    Slab spliceableSlab(long offset, int length) {
        if (length == 0 || volume.fenced() != null) {
            return null;
        }
        int first = (int) (offset >>> volume.slabShift());
        if (first != (int) ((offset + length - 1) >>> volume.slabShift())) {
            return null;
        }
        Slab s = volume.slabs()[first];
        ReplicaSet set = s.set;
        if (set == null || set.lost() || s.resyncWanted.get()
                || (volume.host.hedger() != null && set.live.size() > 1 && length <= ReadHedger.MAX_HEDGED_BYTES)
                || (set.live.size() > 1 && s.writeOrder.landing(offset - s.start, length) != null)) {
            return null; // a write landing on the range: the usual path waits for it (readSlab)
        }
        return s;
    }

    /** See {@link Volume#readSpliced}. */
    CompletableFuture<Integer> readSpliced(long offset, ByteBuffer dst, Pipe pipe) {
        int length = dst.remaining();
        Slab s = spliceableSlab(offset, length);
        ReplicaSet set = s == null ? null : s.set;
        if (set == null) {
            return read(offset, dst).thenApply(v -> 0);
        }
        MemorySegment seg = MemorySegment.ofBuffer(dst);
        long within = offset - s.start;
        Replica r = set.forRead();
        AtomicInteger piped = new AtomicInteger();
        return counted(r, RemoteOpMetrics.Op.READ, length,
                x -> x.connection().readSpliced(x.region(), within, seg, pipe).thenAccept(piped::set))
                .handle((v, e) -> e == null ? CompletableFuture.completedFuture(piped.get())
                        : afterFailedRead(s, r, within, seg, e, 0).thenApply(w -> 0))
                .thenCompose(Function.identity());
    }

    /** Reads {@code dst.byteSize()} bytes at {@code offset} within {@code s}; {@code attempt} counts the retries. */
    CompletableFuture<Void> readSlab(Slab s, long offset, MemorySegment dst, int attempt) {
        ReplicaSet set = s.set;
        if (set == null) {
            dst.fill((byte) 0);
            return CompletableFuture.completedFuture(null);
        }
        if (set.lost()) {
            return CompletableFuture.failedFuture(volume.lostError(s));
        }
        if (set.live.size() > 1) {
            CompletableFuture<Void> landing = s.writeOrder.landing(offset, dst.byteSize());
            if (landing != null) { // a write is reaching the replicas one by one: read once it is on all of them
                return landing.thenCompose(x -> readSlab(s, offset, dst, attempt));
            }
        }
        ReadHedger hedger = volume.host.hedger();
        if (hedger != null && set.live.size() > 1 && dst.byteSize() <= ReadHedger.MAX_HEDGED_BYTES
                && !s.resyncWanted.get()) {
            CompletableFuture<Void> hedged = HedgedRead.send(volume, hedger, s, set, offset, dst, attempt);
            if (hedged != null) {
                return hedged;
            } // else no scratch memory left: read it straight, unhedged
        }
        // Until a resync has made the replicas equal, every read comes from the one the others are copied from.
        Replica r = s.resyncWanted.get() ? set.live.getFirst() : set.forRead();
        return counted(r, RemoteOpMetrics.Op.READ, dst.byteSize(), x -> x.connection().read(x.region(), offset, dst))
                .handle((v, e) -> e == null ? CompletableFuture.<Void>completedFuture(null)
                        : afterFailedRead(s, r, offset, dst, e, attempt))
                .thenCompose(Function.identity());
    }

    /**
     * What follows a read of replica {@code r} that failed with {@code e}: a refused lease fences the volume (not read
     * from another replica: the volume is not ours now); a replica fault takes {@code r} out and reads again from
     * another, up to R + 1 attempts; anything else is EIO.
     */
    private CompletableFuture<Void> afterFailedRead(Slab s, Replica r, long offset, MemorySegment dst, Throwable e,
            int attempt) {
        Throwable cause = Failures.cause(e);
        if (ReplicaOps.leaseLost(cause)) {
            return volume.failFenced(r, cause);
        }
        if (!ReplicaOps.replicaFault(cause) || attempt >= volume.spec().replicas() + 1) {
            return CompletableFuture.failedFuture(volume.ioError(s, "read", cause));
        }
        s.fail(r, Failures.reason(cause)); // takes it out at once; the retry need not wait for the re-tagging
        return readSlab(s, offset, dst, attempt + 1);
    }

    /** See {@link Volume#blockStatus}: holes and zeroes as the slabs' zero maps know them. */
    CompletableFuture<List<Extent>> blockStatus(long offset, long length, int maxExtents) {
        if (volume.fenced() != null) { // the map describes data this bridge no longer serves
            return CompletableFuture.failedFuture(volume.fencedError());
        }
        Slab[] slabs = volume.slabs();
        List<Extent> out = new ArrayList<>();
        long pos = offset;
        long end = offset + length;
        int state = -1;
        long runStart = pos;
        while (pos < end) {
            Slab s = slabs[(int) (pos >>> volume.slabShift())];
            ZeroMap z = s.zeros;
            int st;
            long next;
            if (s.set == null) {
                st = Nbd.STATE_HOLE | Nbd.STATE_ZERO;
                next = Math.min(end, s.start + s.length);
            } else if (z == null) {
                st = 0;
                next = Math.min(end, s.start + s.length);
            } else {
                st = z.state(pos - s.start);
                next = Math.min(end, ((pos >>> ZeroMap.BLOCK_SHIFT) + 1) << ZeroMap.BLOCK_SHIFT);
            }
            if (state != -1 && st != state) {
                out.add(new Extent(pos - runStart, state));
                runStart = pos;
                if (out.size() == maxExtents) {
                    return CompletableFuture.completedFuture(out);
                }
            }
            state = st;
            pos = next;
        }
        out.add(new Extent(pos - runStart, state));
        return CompletableFuture.completedFuture(out);
    }
}
