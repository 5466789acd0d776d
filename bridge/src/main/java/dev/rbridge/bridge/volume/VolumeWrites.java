package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.RemoteOpMetrics;
import dev.rbridge.bridge.volume.ReplicaOps.ReplicaOp;
import dev.rbridge.common.Failures;
import dev.rbridge.common.RateLimitedLog;
import dev.rbridge.nbd.device.BlockDeviceException;
import dev.rbridge.nbd.protocol.Errno;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

import static dev.rbridge.bridge.volume.ReplicaOps.counted;

/**
 * The write side of a volume's data path (WRITE, WRITE_ZEROES, TRIM): a request is cut at slab boundaries and each
 * piece sent to every live replica and to a replica being built, once the rebuild gate and the write order let it
 * through; it completes when all of them have it in their memory. A slab's first write places its replicas; a replica
 * that misses a write is taken out. The slab's zero map is kept honest on the way.
 */
final class VolumeWrites {
    /** Logged as the volume, as before the write path had a class of its own. */
    private static final Logger log = LoggerFactory.getLogger(Volume.class);

    private final Volume volume;
    /** Out-of-space failures are as frequent as writes to new slabs: logged once per interval per volume. */
    private final RateLimitedLog limited = new RateLimitedLog(log);
    /** Requests failed with ENOSPC: no memserver had room for a slab they touched. */
    private final AtomicLong outOfSpace = new AtomicLong();
    /** When the last ENOSPC happened (System.nanoTime), or 0. */
    private volatile long lastOutOfSpaceNanos;

    VolumeWrites(Volume volume) {
        this.volume = volume;
    }

    /** What a mutation does: write data, or zero (reporting the range as a hole afterwards, or not). */
    enum Kind {
        WRITE, ZERO, PUNCH
    }

    private interface PieceOps {
        ReplicaOp forPiece(Slab s, long slabOffset, long length, long volumeOffset);
    }

    /** See {@link Volume#outOfSpaceFailures}. */
    long outOfSpaceFailures() {
        return outOfSpace.get();
    }

    /** See {@link Volume#outOfSpaceWithin}. */
    boolean outOfSpaceWithin(long nanos) {
        long last = lastOutOfSpaceNanos;
        return last != 0 && System.nanoTime() - last < nanos;
    }

    /** See {@link Volume#write}. */
    CompletableFuture<Void> write(long offset, ByteBuffer src) {
        int length = src.remaining();
        if (length == 0) {
            return CompletableFuture.completedFuture(null);
        }
        MemorySegment seg = MemorySegment.ofBuffer(src);
        return mutate(offset, length, Kind.WRITE, (s, off, len, pos) -> {
            MemorySegment piece = seg.asSlice(pos - offset, len);
            return r -> r.connection().write(r.region(), off, piece);
        });
    }

    /** Zeroes {@code length} bytes at {@code offset}: WRITE_ZEROES ({@code ZERO} or {@code PUNCH}) and TRIM. */
    CompletableFuture<Void> zeroes(long offset, long length, Kind kind) {
        if (length == 0) {
            return CompletableFuture.completedFuture(null);
        }
        // The memserver gives whole pages back with madvise either way; NO_HOLE only changes what BLOCK_STATUS says.
        return mutate(offset, length, kind, (s, off, len, pos) -> r -> r.connection().zero(r.region(), off, len));
    }

    private CompletableFuture<Void> mutate(long offset, long length, Kind kind, PieceOps ops) {
        if (volume.fenced() != null) {
            return CompletableFuture.failedFuture(volume.fencedError());
        }
        Slab[] slabs = volume.slabs();
        int first = (int) (offset >>> volume.slabShift());
        int last = (int) ((offset + length - 1) >>> volume.slabShift());
        if (first == last) {
            Slab s = slabs[first];
            long off = offset - s.start;
            return tracked(s, off, length, kind, ops.forPiece(s, off, length, offset));
        }
        CompletableFuture<?>[] parts = new CompletableFuture<?>[last - first + 1];
        for (int i = first; i <= last; i++) {
            Slab s = slabs[i];
            long from = Math.max(offset, s.start);
            long to = Math.min(offset + length, s.start + s.length);
            parts[i - first] = tracked(s, from - s.start, to - from, kind,
                    ops.forPiece(s, from - s.start, to - from, from));
        }
        return CompletableFuture.allOf(parts);
    }

    /**
     * Keeps the slab's zero map honest: a write forgets the blocks it touches before it is issued; a zeroing marks its
     * blocks only if no data write was in flight when it started and none was issued before it finished (NBD leaves
     * the order of overlapping requests open, but BLOCK_STATUS must never call data zero).
     */
    private CompletableFuture<Void> tracked(Slab s, long offset, long length, Kind kind, ReplicaOp op) {
        if (kind == Kind.WRITE) {
            s.dataWritesInFlight.incrementAndGet(); // before "issued": a zeroing that sees neither is truly alone
            s.dataWritesIssued.incrementAndGet();
            ZeroMap z = s.zeros;
            if (z != null) {
                z.clear(offset, length);
            }
            return mutateSlab(s, offset, length, false, op)
                    .whenComplete((v, e) -> s.dataWritesInFlight.decrementAndGet());
        }
        if (s.set == null) {
            return mutateSlab(s, offset, length, true, op); // never written: reads as zeroes, reported as a hole
        }
        ZeroMap z = s.zeroMap();
        long issued = s.dataWritesIssued.get();
        boolean quiet = s.dataWritesInFlight.get() == 0;
        return mutateSlab(s, offset, length, true, op).thenRun(() -> {
            if (quiet) {
                z.mark(offset, length, kind == Kind.PUNCH);
                if (s.dataWritesIssued.get() != issued) {
                    z.clear(offset, length);
                }
            }
        });
    }

    private CompletableFuture<Void> mutateSlab(Slab s, long offset, long length, boolean zero, ReplicaOp op) {
        ReplicaSet set = s.set;
        if (set == null) {
            if (zero) {
                return CompletableFuture.completedFuture(null); // never written: it reads as zeroes already
            }
            return s.allocate().handle((x, e) -> e == null ? mutateSlab(s, offset, length, false, op)
                    : CompletableFuture.<Void>failedFuture(allocationError(s, Failures.cause(e))))
                    .thenCompose(Function.identity());
        }
        set.writesInFlight.incrementAndGet();
        if (s.set != set) { // a rebuild may be waiting for this state's writes to drain: use the new one
            set.writesInFlight.decrementAndGet();
            return mutateSlab(s, offset, length, zero, op);
        }
        if (set.lost()) {
            set.writesInFlight.decrementAndGet();
            return CompletableFuture.failedFuture(volume.lostError(s));
        }
        RebuildGate gate = set.gate;
        if (gate != null) {
            CompletableFuture<Void> wait = gate.enter(offset, length);
            if (wait != null) {
                set.writesInFlight.decrementAndGet();
                return wait.thenCompose(x -> mutateSlab(s, offset, length, zero, op));
            }
        }
        int n = set.live.size() + (set.building != null ? 1 : 0);
        if (n == 1) {
            return toOnly(s, set, length, zero, op);
        }
        CompletableFuture<?>[] overlapped = new CompletableFuture<?>[1];
        WriteOrder.Ticket ticket = s.writeOrder.enter(offset, length, overlapped);
        if (ticket == null) { // an overlapping write is in flight: it must land everywhere before this one is sent
            if (gate != null) {
                gate.leave(offset, length);
            }
            set.writesInFlight.decrementAndGet();
            return overlapped[0].thenCompose(x -> mutateSlab(s, offset, length, zero, op));
        }
        return toAll(new Fanout(s, set, gate, ticket, offset, length, zero), n, op);
    }

    /** One replica (R=1, or a degraded slab): no bookkeeping beyond the one future. */
    private CompletableFuture<Void> toOnly(Slab s, ReplicaSet set, long length, boolean zero, ReplicaOp op) {
        Replica only = set.live.getFirst();
        return counted(only, zero ? RemoteOpMetrics.Op.ZERO : RemoteOpMetrics.Op.WRITE, length, op)
                .handle((v, e) -> {
                    set.writesInFlight.decrementAndGet();
                    if (e == null) {
                        return set.tagged;
                    }
                    return afterFailures(s, List.of(only), 1, new Throwable[]{Failures.cause(e)}, zero);
                }).thenCompose(Function.identity());
    }

    /** A piece on its way to every replica of a slab: what must be let go once all have answered. */
    private record Fanout(Slab s, ReplicaSet set, RebuildGate gate, WriteOrder.Ticket ticket, long offset,
            long length, boolean zero) {
    }

    /** Sends the piece to the {@code n} replicas, live and being built, and completes once every one has answered. */
    private CompletableFuture<Void> toAll(Fanout f, int n, ReplicaOp op) {
        ReplicaSet set = f.set();
        Replica[] targets = new Replica[n];
        for (int i = 0; i < set.live.size(); i++) {
            targets[i] = set.live.get(i);
        }
        if (set.building != null) {
            targets[n - 1] = set.building;
        }
        Throwable[] errors = new Throwable[n];
        AtomicInteger pending = new AtomicInteger(n);
        CompletableFuture<Void> result = new CompletableFuture<>();
        for (int i = 0; i < n; i++) {
            int k = i;
            counted(targets[i], f.zero() ? RemoteOpMetrics.Op.ZERO : RemoteOpMetrics.Op.WRITE, f.length(), op)
                    .whenComplete((v, e) -> {
                        if (e != null) {
                            errors[k] = Failures.cause(e);
                        }
                        if (pending.decrementAndGet() == 0) {
                            allAnswered(f, targets, errors, result);
                        }
                    });
        }
        return result;
    }

    /** Every replica answered the piece: the gate and the write order are let go, failures taken out, then done. */
    private void allAnswered(Fanout f, Replica[] targets, Throwable[] errors, CompletableFuture<Void> result) {
        ReplicaSet set = f.set();
        if (f.gate() != null) {
            f.gate().leave(f.offset(), f.length());
        }
        set.writesInFlight.decrementAndGet();
        boolean failed = false;
        for (Throwable t : errors) {
            failed |= t != null;
        }
        CompletableFuture<Void> done = failed
                ? afterFailures(f.s(), List.of(targets), set.live.size(), errors, f.zero()).thenCompose(x -> set.tagged)
                : set.tagged;
        // Only now: a replica that missed the write is out of the live set (afterFailures takes it out
        // at once), so no read that waits for this write can be served by it afterwards.
        f.s().writeOrder.leave(f.ticket());
        done.whenComplete((x, y) -> {
            if (y == null) {
                result.complete(null);
            } else {
                result.completeExceptionally(Failures.cause(y));
            }
        });
    }

    /**
     * Some replicas failed a write: take them out (which re-tags the survivors) and acknowledge only if a live replica
     * that took the write is left with its generation recorded.
     */
    private CompletableFuture<Void> afterFailures(Slab s, List<Replica> targets, int liveCount, Throwable[] errors,
            boolean zero) {
        for (int i = 0; i < targets.size(); i++) {
            if (ReplicaOps.leaseLost(errors[i])) {
                // Not acknowledged on the replicas that took it, nor any replica taken out: the volume is fenced.
                return volume.failFenced(targets.get(i), errors[i]);
            }
        }
        int okLive = 0;
        Throwable first = null;
        List<CompletableFuture<Void>> removals = new ArrayList<>();
        for (int i = 0; i < targets.size(); i++) {
            Throwable t = errors[i];
            if (t == null) {
                if (i < liveCount) {
                    okLive++;
                }
                continue;
            }
            if (first == null) {
                first = t;
            }
            // Whatever the error, a live replica that missed an acknowledged write must not serve reads again.
            removals.add(s.fail(targets.get(i), Failures.reason(t)));
        }
        if (okLive == 0) {
            return CompletableFuture.failedFuture(volume.ioError(s, zero ? "zero" : "write", first));
        }
        CompletableFuture<Void> all = CompletableFuture.allOf(removals.toArray(CompletableFuture[]::new));
        Throwable firstError = first;
        return all.handle((v, e) -> {
            if (e != null) {
                throw new CompletionException(volume.ioError(s, zero ? "zero" : "write", firstError));
            }
            return null;
        });
    }

    private BlockDeviceException allocationError(Slab s, Throwable cause) {
        if (cause instanceof BlockDeviceException b) {
            return b;
        }
        Errno errno = cause instanceof RemoteMemoryException e && e.status() == Status.NO_CAPACITY
                ? Errno.ENOSPC
                : Errno.EIO;
        String name = volume.name();
        if (errno == Errno.ENOSPC) {
            outOfSpace.incrementAndGet();
            lastOutOfSpaceNanos = System.nanoTime();
            limited.warn("enospc-" + name, "volume {}: writes to slab {} fail with ENOSPC: {}; add a memserver"
                    + " or raise a memserver's --capacity", name, s.index, Failures.reason(cause));
        }
        return new BlockDeviceException(errno, "no memory for volume " + name + " slab " + s.index + ": "
                + Failures.reason(cause), cause);
    }
}
