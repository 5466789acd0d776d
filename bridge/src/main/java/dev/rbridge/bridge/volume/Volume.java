package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.memservers.RemoteOpMetrics;
import dev.rbridge.common.Failures;
import dev.rbridge.common.splice.Pipe;
import dev.rbridge.nbd.device.BlockDevice;
import dev.rbridge.nbd.device.BlockDeviceException;
import dev.rbridge.nbd.device.Extent;
import dev.rbridge.nbd.protocol.Errno;
import dev.rbridge.nbd.protocol.Nbd;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.RemoteMemoryException;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Function;

/**
 * A volume as an NBD block device. Requests are cut at slab boundaries; reads go to one live replica of the slab
 * (spread across them, retried on another if one fails), writes and zeroes go to every live replica and to a replica
 * being rebuilt, and complete when all of them have the data in their memory. A slab never written has no replicas
 * and reads as zeroes without a round trip.
 *
 * <p>FLUSH and FUA need no round trip: a remote write completes only once the bytes are in the memserver's memory,
 * and this device acknowledges a write only after every live replica completed it.
 *
 * <p>A volume whose lease this bridge lost on some memserver (another client took it over, so its keys changed) is
 * <em>fenced</em>: from then on every request fails with EIO, whatever replicas it could still reach, FLUSH and
 * BLOCK_STATUS included. Writing on to those would make two owners of one volume; failing is what the new owner needs
 * from this bridge, and what tells its clients that their writes are not safe here.
 */
public final class Volume implements BlockDevice {
    /** Replaced when the volume grows, after {@link #slabs}: whoever sees the new size finds its slabs. */
    volatile VolumeSpec spec;
    final SlabHost host;
    final AllocationManifest manifest;
    /** Replaced when the volume grows (the old slabs kept at their indices). */
    private volatile Slab[] slabs;
    private final int slabShift;
    /** Why this volume is fenced (its lease was lost), or null while it is served. */
    private volatile String fenced;
    private static final org.slf4j.Logger log = org.slf4j.LoggerFactory.getLogger(Volume.class);
    /** Out-of-space failures are as frequent as writes to new slabs: logged once per interval per volume. */
    private final dev.rbridge.common.RateLimitedLog limited = new dev.rbridge.common.RateLimitedLog(log);
    /** Requests failed with ENOSPC: no memserver had room for a slab they touched. */
    private final java.util.concurrent.atomic.AtomicLong outOfSpace = new java.util.concurrent.atomic.AtomicLong();
    /** When the last ENOSPC happened (System.nanoTime), or 0. */
    private volatile long lastOutOfSpaceNanos;
    /** What small reads take here: the hedge delay ({@link ReadHedger}). */
    final ReadLatency readLatency = new ReadLatency();
    /** Second attempts sent by hedged reads, and those that answered first. */
    final java.util.concurrent.atomic.LongAdder readHedges = new java.util.concurrent.atomic.LongAdder();
    final java.util.concurrent.atomic.LongAdder readHedgesWon = new java.util.concurrent.atomic.LongAdder();

    public Volume(VolumeSpec spec, SlabHost host) {
        this.spec = spec;
        this.host = host;
        this.slabShift = Long.numberOfTrailingZeros(spec.slabSize());
        this.slabs = new Slab[spec.slabCount()];
        this.manifest = new AllocationManifest(spec.name(), slabs.length);
        for (int i = 0; i < slabs.length; i++) {
            long start = (long) i << slabShift;
            slabs[i] = new Slab(this, i, start, Math.min(spec.slabSize(), spec.size() - start));
        }
    }

    public String name() {
        return spec.name();
    }

    /**
     * Grows the volume while it serves: new slabs past the old end, unallocated until written (like every slab of a new
     * volume). NBD connections made from now on see the new size; connections already open keep the size they were
     * given. Refused with a sentence: IllegalArgumentException when no volume can grow to {@code newSize} while serving
     * (not a size this volume can have, or more slabs than its allocation manifest holds), IllegalStateException when
     * this volume cannot grow now (the size is not larger, or the old end cuts a slab: its regions have that slab's old
     * length). Every bound is checked, in long arithmetic, before anything is allocated.
     */
    public synchronized void grow(long newSize) {
        VolumeSpec old = spec;
        if (newSize <= old.size()) {
            throw new IllegalStateException("volume " + old.name() + " is " + old.size() + " bytes; "
                    + (newSize == old.size() ? "it already has that size" : "shrinking needs a restart with"
                    + " --allow-shrink, which discards what lies past the new end"));
        }
        if (old.size() % old.slabSize() != 0) {
            throw new IllegalStateException("volume " + old.name() + " ends inside a slab (size " + old.size()
                    + " is not a multiple of its slab size " + old.slabSize() + "), and that slab's regions have its"
                    + " shorter length: it cannot grow");
        }
        VolumeSpec grown = new VolumeSpec(old.name(), newSize, old.slabSize(), old.replicas(), old.readOnly(),
                old.minimumBlockSize(), old.description()); // refuses a size of more slabs than an int counts
        if (!manifest.growTo(grown.slabCount())) {
            throw new IllegalArgumentException("volume " + old.name() + " would have " + grown.slabCount() + " slabs,"
                    + " more than its allocation manifest holds while serving; restart the bridge with the new size");
        }
        Slab[] now = slabs;
        Slab[] more = java.util.Arrays.copyOf(now, grown.slabCount());
        for (int i = now.length; i < more.length; i++) {
            long start = (long) i << slabShift;
            more[i] = new Slab(this, i, start, Math.min(grown.slabSize(), newSize - start));
        }
        slabs = more;
        spec = grown;
    }

    public VolumeSpec spec() {
        return spec;
    }

    public int replicas() {
        return spec.replicas();
    }

    public AllocationManifest manifest() {
        return manifest;
    }

    public Slab slab(int index) {
        return slabs[index];
    }

    public int slabCount() {
        return slabs.length;
    }

    @Override
    public long size() {
        return spec.size();
    }

    /**
     * Stops serving this volume for good ({@code reason}: which lease was lost where); true the first time. Every
     * request from now on fails with EIO and no rebuild touches it.
     */
    public boolean fence(String reason) {
        synchronized (this) {
            if (fenced != null) {
                return false;
            }
            fenced = reason;
            return true;
        }
    }

    /** Why this volume is fenced, or null while it is served. */
    public String fenced() {
        return fenced;
    }

    /** Requests failed with ENOSPC because no memserver had room for a slab they needed. */
    public long outOfSpaceFailures() {
        return outOfSpace.get();
    }

    /** Reads sent to a second replica because the first had not answered within the hedge delay. */
    public long readHedges() {
        return readHedges.sum();
    }

    /** Hedged reads whose second attempt answered first. */
    public long readHedgesWon() {
        return readHedgesWon.sum();
    }

    /** How long a small read may take here before it is hedged (nanoseconds): the current estimate. */
    public long hedgeDelayNanos() {
        return readLatency.delayNanos();
    }

    /** Whether a request failed with ENOSPC within the last {@code nanos}. */
    public boolean outOfSpaceWithin(long nanos) {
        long last = lastOutOfSpaceNanos;
        return last != 0 && System.nanoTime() - last < nanos;
    }

    private BlockDeviceException fencedError() {
        return new BlockDeviceException(Errno.EIO, "volume " + spec.name() + " is no longer served by this bridge: "
                + fenced);
    }

    /** A replica's memserver refused its key or the volume as another client's: its lease went elsewhere. */
    static boolean leaseLost(Throwable t) {
        return Failures.cause(t) instanceof RemoteMemoryException e && e.status() == Status.ACCESS_DENIED;
    }

    /** Reports a lost lease to the host (which fences this volume) and fails the request with EIO. */
    <T> CompletableFuture<T> failFenced(Replica r, Throwable cause) {
        host.leaseLost(this, r, Failures.reason(cause));
        return CompletableFuture.failedFuture(fenced != null ? fencedError()
                : new BlockDeviceException(Errno.EIO, "volume " + spec.name() + ": " + Failures.reason(cause), cause));
    }

    // ------------------------------------------------------------------------------------------------ data path

    @Override
    public CompletableFuture<Void> read(long offset, ByteBuffer dst) {
        int length = dst.remaining();
        if (length == 0) {
            return CompletableFuture.completedFuture(null);
        }
        if (fenced != null) {
            return CompletableFuture.failedFuture(fencedError());
        }
        MemorySegment seg = MemorySegment.ofBuffer(dst);
        int first = (int) (offset >>> slabShift);
        int last = (int) ((offset + length - 1) >>> slabShift);
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

    @Override
    public boolean splicesReads() {
        return host.splicesReads();
    }

    @Override
    public boolean splicesRead(long offset, int length) {
        return host.splicesReads() && spliceableSlab(offset, length) != null;
    }

    /** The slab a READ would be spliced from: within one slab, one replica, not hedged, not resyncing; or null. */
    private Slab spliceableSlab(long offset, int length) {
        if (length == 0 || fenced != null) {
            return null;
        }
        int first = (int) (offset >>> slabShift);
        if (first != (int) ((offset + length - 1) >>> slabShift)) {
            return null;
        }
        Slab s = slabs[first];
        ReplicaSet set = s.set;
        if (set == null || set.lost() || s.resyncWanted.get()
                || (host.hedger() != null && set.live.size() > 1 && length <= ReadHedger.MAX_HEDGED_BYTES)
                || (set.live.size() > 1 && s.writeOrder.landing(offset - s.start, length) != null)) {
            return null; // a write landing on the range: the usual path waits for it (readSlab)
        }
        return s;
    }

    /**
     * A read within one slab from one replica is spliced where the provider can (see
     * {@link dev.rbridge.rdma.RemoteConnection#readSpliced}); everything else (more than one slab, a read that would
     * be hedged, a slab being resynced or never written) reads into {@code dst}. A spliced attempt that fails is
     * handled as a failed read (a lost lease fences, a faulty replica is taken out) and read again into {@code dst}
     * along the usual path: the pipe is then the caller's to drop.
     */
    @Override
    public CompletableFuture<Integer> readSpliced(long offset, ByteBuffer dst, Pipe pipe) {
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

    CompletableFuture<Void> readSlab(Slab s, long offset, MemorySegment dst, int attempt) {
        ReplicaSet set = s.set;
        if (set == null) {
            dst.fill((byte) 0);
            return CompletableFuture.completedFuture(null);
        }
        if (set.lost()) {
            return CompletableFuture.failedFuture(lostError(s));
        }
        if (set.live.size() > 1) {
            CompletableFuture<Void> landing = s.writeOrder.landing(offset, dst.byteSize());
            if (landing != null) { // a write is reaching the replicas one by one: read once it is on all of them
                return landing.thenCompose(x -> readSlab(s, offset, dst, attempt));
            }
        }
        ReadHedger hedger = host.hedger();
        if (hedger != null && set.live.size() > 1 && dst.byteSize() <= ReadHedger.MAX_HEDGED_BYTES
                && !s.resyncWanted.get()) {
            CompletableFuture<Void> hedged = HedgedRead.send(this, hedger, s, set, offset, dst, attempt);
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
        if (leaseLost(cause)) {
            return failFenced(r, cause);
        }
        if (!replicaFault(cause) || attempt >= spec.replicas() + 1) {
            return CompletableFuture.failedFuture(ioError(s, "read", cause));
        }
        s.fail(r, Failures.reason(cause)); // takes it out at once; the retry need not wait for the re-tagging
        return readSlab(s, offset, dst, attempt + 1);
    }

    @Override
    public CompletableFuture<Void> write(long offset, ByteBuffer src, boolean fua) {
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

    @Override
    public CompletableFuture<Void> flush() {
        // Nothing to wait for (see the class comment), but a fenced volume must not tell a client its writes are
        // durable: the bridge that owns the volume now may have written over them.
        return fenced != null ? CompletableFuture.failedFuture(fencedError()) : CompletableFuture.completedFuture(null);
    }

    @Override
    public CompletableFuture<Void> trim(long offset, long length, boolean fua) {
        return zeroes(offset, length, Kind.PUNCH);
    }

    @Override
    public CompletableFuture<Void> writeZeroes(long offset, long length, boolean mayPunchHole, boolean fua) {
        return zeroes(offset, length, mayPunchHole ? Kind.PUNCH : Kind.ZERO);
    }

    private CompletableFuture<Void> zeroes(long offset, long length, Kind kind) {
        if (length == 0) {
            return CompletableFuture.completedFuture(null);
        }
        // The memserver gives whole pages back with madvise either way; NO_HOLE only changes what BLOCK_STATUS says.
        return mutate(offset, length, kind, (s, off, len, pos) -> r -> r.connection().zero(r.region(), off, len));
    }

    /** What a mutation does: write data, or zero (reporting the range as a hole afterwards, or not). */
    private enum Kind { WRITE, ZERO, PUNCH }

    @Override
    public boolean fastZero() {
        return true;
    }

    /**
     * Counts a remote operation as in flight on its memserver until it completes. The future returned is the counting
     * stage, not the operation's: a CompletableFuture runs its dependents last-registered-first, so a caller's stage
     * hung on the operation itself would run (and answer the volume's caller) before the count dropped. A failure
     * arrives wrapped in a CompletionException ({@code Failures.cause} unwraps it).
     */
    static CompletableFuture<Void> counted(Replica r, RemoteOpMetrics.Op kind, long bytes, ReplicaOp op) {
        MemserverLink link = r.link();
        AtomicLong n = link.inFlight;
        RemoteOpMetrics metrics = link.metrics;
        boolean timed = metrics != RemoteOpMetrics.NONE;
        n.incrementAndGet();
        long start = timed ? System.nanoTime() : 0;
        CompletableFuture<Void> f;
        try {
            f = op.apply(r);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e); // a synchronous throw must not leak the in-flight counts
        }
        LongAdder done = link.completed;
        if (f.isDone()) { // completed inline (the local transport, an early failure): no completion stage needed
            n.decrementAndGet();
            done.increment();
            if (timed) {
                metrics.completed(kind, bytes, System.nanoTime() - start, f.isCompletedExceptionally());
            }
        } else if (timed) {
            return f.whenComplete((v, e) -> {
                n.decrementAndGet();
                done.increment();
                metrics.completed(kind, bytes, System.nanoTime() - start, e != null);
            });
        } else {
            return f.whenComplete((v, e) -> {
                n.decrementAndGet();
                done.increment();
            });
        }
        return f;
    }

    /** One remote operation for one replica of a slab piece. */
    interface ReplicaOp {
        CompletableFuture<Void> apply(Replica r);
    }

    private interface PieceOps {
        ReplicaOp forPiece(Slab s, long slabOffset, long length, long volumeOffset);
    }

    private CompletableFuture<Void> mutate(long offset, long length, Kind kind, PieceOps ops) {
        if (fenced != null) {
            return CompletableFuture.failedFuture(fencedError());
        }
        int first = (int) (offset >>> slabShift);
        int last = (int) ((offset + length - 1) >>> slabShift);
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
            parts[i - first] = tracked(s, from - s.start, to - from, kind, ops.forPiece(s, from - s.start, to - from, from));
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
            return mutateSlab(s, offset, length, false, op).whenComplete((v, e) -> s.dataWritesInFlight.decrementAndGet());
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
                    : CompletableFuture.<Void>failedFuture(allocationError(s, Failures.cause(e)))).thenCompose(Function.identity());
        }
        set.writesInFlight.incrementAndGet();
        if (s.set != set) { // a rebuild may be waiting for this state's writes to drain: use the new one
            set.writesInFlight.decrementAndGet();
            return mutateSlab(s, offset, length, zero, op);
        }
        if (set.lost()) {
            set.writesInFlight.decrementAndGet();
            return CompletableFuture.failedFuture(lostError(s));
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
        Replica only = n == 1 ? set.live.getFirst() : null;
        if (only != null) {
            // One replica (R=1, or a degraded slab): no bookkeeping beyond the one future.
            return counted(only, zero ? RemoteOpMetrics.Op.ZERO : RemoteOpMetrics.Op.WRITE, length, op)
                    .handle((v, e) -> {
                set.writesInFlight.decrementAndGet();
                if (e == null) {
                    return set.tagged;
                }
                return afterFailures(s, List.of(only), 1, new Throwable[]{Failures.cause(e)}, zero);
            }).thenCompose(Function.identity());
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
            counted(targets[i], zero ? RemoteOpMetrics.Op.ZERO : RemoteOpMetrics.Op.WRITE, length, op)
                    .whenComplete((v, e) -> {
                if (e != null) {
                    errors[k] = Failures.cause(e);
                }
                if (pending.decrementAndGet() == 0) {
                    if (gate != null) {
                        gate.leave(offset, length);
                    }
                    set.writesInFlight.decrementAndGet();
                    boolean failed = false;
                    for (Throwable t : errors) {
                        failed |= t != null;
                    }
                    CompletableFuture<Void> done = failed
                            ? afterFailures(s, List.of(targets), set.live.size(), errors, zero).thenCompose(x -> set.tagged)
                            : set.tagged;
                    // Only now: a replica that missed the write is out of the live set (afterFailures takes it out
                    // at once), so no read that waits for this write can be served by it afterwards.
                    s.writeOrder.leave(ticket);
                    done.whenComplete((x, y) -> {
                        if (y == null) {
                            result.complete(null);
                        } else {
                            result.completeExceptionally(Failures.cause(y));
                        }
                    });
                }
            });
        }
        return result;
    }

    /**
     * Some replicas failed a write: take them out (which re-tags the survivors) and acknowledge only if a live replica
     * that took the write is left with its generation recorded.
     */
    private CompletableFuture<Void> afterFailures(Slab s, List<Replica> targets, int liveCount, Throwable[] errors,
                                                  boolean zero) {
        for (int i = 0; i < targets.size(); i++) {
            if (leaseLost(errors[i])) {
                // Not acknowledged on the replicas that took it, nor any replica taken out: the volume is fenced.
                return failFenced(targets.get(i), errors[i]);
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
            return CompletableFuture.failedFuture(ioError(s, zero ? "zero" : "write", first));
        }
        CompletableFuture<Void> all = CompletableFuture.allOf(removals.toArray(CompletableFuture[]::new));
        Throwable firstError = first;
        return all.handle((v, e) -> {
            if (e != null) {
                throw new CompletionException(ioError(s, zero ? "zero" : "write", firstError));
            }
            return null;
        });
    }

    @Override
    public CompletableFuture<List<Extent>> blockStatus(long offset, long length, int maxExtents) {
        if (fenced != null) { // the map describes data this bridge no longer serves
            return CompletableFuture.failedFuture(fencedError());
        }
        List<Extent> out = new ArrayList<>();
        long pos = offset;
        long end = offset + length;
        int state = -1;
        long runStart = pos;
        while (pos < end) {
            Slab s = slabs[(int) (pos >>> slabShift)];
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

    @Override
    public void close() {
        // The bridge owns the connections and the regions; a volume has nothing of its own to free.
    }

    // ------------------------------------------------------------------------------------------- state changes

    /**
     * Reattach at start: {@code found} holds, per slab index, every region of this volume on the reachable
     * memservers (with its key). Returns the regions to release (stale generations, half-built copies).
     */
    public List<Replica> reattach(Map<Integer, List<Replica>> found) {
        List<Replica> release = new ArrayList<>();
        for (var e : found.entrySet()) {
            int index = e.getKey();
            if (index < 0 || index >= slabs.length) {
                release.addAll(e.getValue()); // a slab beyond the configured size: the volume shrank
                continue;
            }
            for (Replica r : e.getValue()) {
                if (r.region().length() != slabs[index].length) {
                    throw new IllegalStateException("volume '" + spec.name() + "': memserver " + r.link().label()
                            + " holds slab " + index + " as " + r.region().length() + " bytes, but the configured size "
                            + spec.size() + " and slab size " + spec.slabSize() + " make it " + slabs[index].length
                            + " bytes; start with the size and slab size the volume was created with");
                }
            }
            release.addAll(slabs[index].reattach(e.getValue()));
        }
        for (Slab s : slabs) {
            if (s.set == null && manifest.allocated(s.index)) {
                s.lostEverything();
            }
        }
        return release;
    }

    /** How many lost slabs count a region on {@code link} among the copies that may still hold all their data. */
    public long lostCopiesOn(MemserverLink link) {
        long n = 0;
        for (Slab s : slabs) {
            ReplicaSet set = s.set;
            if (set != null && set.lost() && set.lostAtThisGeneration.stream().anyMatch(r -> r.link() == link)) {
                n++;
            }
        }
        return n;
    }

    /** The slabs with a replica (live or being built) on {@code connection}. */
    public List<Slab> slabsOn(RemoteConnection connection) {
        List<Slab> out = new ArrayList<>();
        for (Slab s : slabs) {
            if (s.replicaOn(connection) != null) {
                out.add(s);
            }
        }
        return out;
    }

    /** How many slabs have a replica on {@code connection} (live replicas a memserver holds for this volume). */
    public long replicasOn(RemoteConnection connection) {
        long n = 0;
        for (Slab s : slabs) {
            if (s.replicaOn(connection) != null) {
                n++;
            }
        }
        return n;
    }

    /** A memserver's connection died: every replica on it fails. */
    public void connectionLost(RemoteConnection connection, String reason) {
        for (Slab s : slabs) {
            Replica r = s.replicaOn(connection);
            if (r != null) {
                s.fail(r, reason);
            }
        }
    }

    /**
     * A memserver came back holding {@code candidate}: true if a slab that lost its last replica takes it back (same
     * memserver instance, region and generation), false if it is stale and should be released.
     */
    public boolean adoptLost(Replica candidate) {
        long slab = candidate.region().tag().slab();
        return slab >= 0 && slab < slabs.length && slabs[(int) slab].adoptLost(candidate,
                candidate.region().tag().generation());
    }

    /** The generation a slab is served at (0 if it was never written or the index is out of range). */
    public long currentGeneration(long slab) {
        if (slab < 0 || slab >= slabs.length) {
            return 0;
        }
        ReplicaSet set = slabs[(int) slab].set;
        return set == null ? 0 : set.generation;
    }

    /** True if the region is one of this volume's current replicas (live or building). */
    public boolean holds(String serverId, long regionId) {
        for (Slab s : slabs) {
            ReplicaSet set = s.set;
            if (set == null) {
                continue;
            }
            for (Replica r : set.live) {
                if (r.serverId().equals(serverId) && r.region().id() == regionId) {
                    return true;
                }
            }
            if (set.building != null && set.building.serverId().equals(serverId)
                    && set.building.region().id() == regionId) {
                return true;
            }
        }
        return false;
    }

    /** Fails every replica whose connection has closed (health duty). */
    public void failClosedReplicas() {
        for (Slab s : slabs) {
            s.failClosed();
        }
    }

    /** Slabs with more than one live replica (candidates for a resync). */
    public List<Slab> replicated() {
        List<Slab> out = new ArrayList<>();
        for (Slab s : slabs) {
            ReplicaSet set = s.set;
            if (set != null && set.live.size() > 1) {
                out.add(s);
            }
        }
        return out;
    }

    /** Slabs with fewer live replicas than wanted but at least one (a rebuild can help them). */
    public List<Slab> degraded() {
        List<Slab> out = new ArrayList<>();
        if (fenced != null) {
            return out; // nothing to rebuild for a volume this bridge no longer serves
        }
        for (Slab s : slabs) {
            ReplicaSet set = s.set;
            if (set != null && !set.lost() && set.live.size() < spec.replicas() && set.building == null) {
                out.add(s);
            }
        }
        return out;
    }

    // ------------------------------------------------------------------------------------------------- status

    /** One slab as an operator sees it. */
    public record SlabStatus(int index, long start, long length, SlabState state, long generation, List<String> replicas,
                             String building, long rebuildCopiedBytes) {
    }

    /**
     * The volume as an operator sees it: its {@link VolumeState} and how many of its slabs are in each
     * {@link SlabState} ({@code allocated}: every slab but the unallocated ones).
     */
    public record VolumeStatus(String name, long size, long slabSize, int replicas, VolumeState state, int slabs,
                               int allocated, int healthy, int degraded, int rebuilding, int lost) {
        /** How many slabs are in {@code state}. */
        public int count(SlabState state) {
            return switch (state) {
                case UNALLOCATED -> slabs - allocated;
                case HEALTHY -> healthy;
                case DEGRADED -> degraded;
                case REBUILDING -> rebuilding;
                case LOST -> lost;
            };
        }
    }

    public SlabStatus slabStatus(int index) {
        Slab s = slabs[index];
        ReplicaSet set = s.set;
        if (set == null) {
            return new SlabStatus(index, s.start, s.length, SlabState.UNALLOCATED, 0, List.of(), null, 0);
        }
        List<String> rs = new ArrayList<>();
        set.live.forEach(r -> rs.add(r.describe()));
        return new SlabStatus(index, s.start, s.length, state(set), set.generation, rs,
                set.building == null ? null : set.building.describe(), set.building == null ? 0 : s.rebuildCopied.get());
    }

    private SlabState state(ReplicaSet set) {
        if (set.lost()) {
            return SlabState.LOST;
        }
        if (set.building != null) {
            return SlabState.REBUILDING;
        }
        return set.live.size() >= spec.replicas() ? SlabState.HEALTHY : SlabState.DEGRADED;
    }

    public VolumeStatus status() {
        int allocated = 0, healthy = 0, degraded = 0, rebuilding = 0, lost = 0;
        for (Slab s : slabs) {
            ReplicaSet set = s.set;
            if (set == null) {
                continue;
            }
            allocated++;
            switch (state(set)) {
                case LOST -> lost++;
                case REBUILDING -> rebuilding++;
                case HEALTHY -> healthy++;
                case DEGRADED -> degraded++;
            }
        }
        VolumeState state = fenced != null ? VolumeState.FENCED : lost > 0 ? VolumeState.LOST
                : rebuilding > 0 ? VolumeState.REBUILDING : degraded > 0 ? VolumeState.DEGRADED : VolumeState.HEALTHY;
        return new VolumeStatus(spec.name(), spec.size(), spec.slabSize(), spec.replicas(), state, slabs.length,
                allocated, healthy, degraded, rebuilding, lost);
    }

    // ------------------------------------------------------------------------------------------------- errors

    /** Errors that mean the replica (or its memserver) is unusable, as opposed to a request this bridge got wrong. */
    static boolean replicaFault(Throwable t) {
        if (t instanceof RemoteMemoryException e) {
            return switch (e.status()) {
                case BAD_REQUEST, OUT_OF_RANGE -> false;
                default -> true;
            };
        }
        return false;
    }

    BlockDeviceException lostError(Slab s) {
        return new BlockDeviceException(Errno.EIO, "volume " + spec.name() + " slab " + s.index + " (bytes " + s.start
                + "-" + (s.start + s.length - 1) + ") has no live replica");
    }

    BlockDeviceException ioError(Slab s, String op, Throwable cause) {
        if (cause instanceof BlockDeviceException b) {
            return b;
        }
        return new BlockDeviceException(Errno.EIO, op + " on volume " + spec.name() + " slab " + s.index + " failed: "
                + Failures.reason(cause), cause);
    }

    private BlockDeviceException allocationError(Slab s, Throwable cause) {
        if (cause instanceof BlockDeviceException b) {
            return b;
        }
        Errno errno = cause instanceof RemoteMemoryException e && e.status() == Status.NO_CAPACITY
                ? Errno.ENOSPC : Errno.EIO;
        if (errno == Errno.ENOSPC) {
            outOfSpace.incrementAndGet();
            lastOutOfSpaceNanos = System.nanoTime();
            limited.warn("enospc-" + spec.name(), "volume {}: writes to slab {} fail with ENOSPC: {}; add a memserver"
                    + " or raise a memserver's --capacity", spec.name(), s.index, Failures.reason(cause));
        }
        return new BlockDeviceException(errno, "no memory for volume " + spec.name() + " slab " + s.index + ": "
                + Failures.reason(cause), cause);
    }
}
