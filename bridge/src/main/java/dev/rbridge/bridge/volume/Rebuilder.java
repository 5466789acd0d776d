package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.common.Failures;
import dev.rbridge.common.duty.Duty;
import dev.rbridge.common.duty.DutyCycle;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.LongAdder;

/**
 * The rebuild role: one thread that takes degraded slabs from a queue and copies each onto a new memserver while I/O
 * goes on. For one slab: place a region tagged generation 0 (never trusted after a restart), add it as the building
 * replica so every new write reaches it, wait for the writes issued before that to finish, then copy chunk by chunk
 * behind a {@link RebuildGate} (a chunk of zeroes as ZERO, so a sparse slab costs the new memserver only its data),
 * and finally tag it with the slab's current generation and make it live.
 */
public final class Rebuilder implements Duty, AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Rebuilder.class);
    /**
     * The rest after a rebuild that could not make progress (no room, a failure) before the next is tried (public for
     * the simulator, module {@code sim}).
     */
    public static final Duration BACKOFF = Duration.ofSeconds(1);

    private final SlabHost host;
    private final int chunkSize;
    /** A chunk of zeroes, to tell chunks that hold nothing (never written, or trimmed) from the rest. */
    private final MemorySegment zeroChunk;
    private final LinkedBlockingQueue<Slab> queue = new LinkedBlockingQueue<>();
    private volatile DutyCycle cycle;
    private volatile boolean running = true;
    /** The copy buffer, one chunk; the duty thread's own, allocated on its first copy. */
    private ByteBuffer buffer;
    private volatile Slab current;
    private volatile long backoffUntilNanos;
    /** Totals since start, for metrics: bytes copied into new or resynchronized replicas, copies done and failed. */
    private final LongAdder copiedBytes = new LongAdder();
    /** Of those, bytes sent as ZERO (the chunk held only zeroes). */
    private final LongAdder zeroedBytes = new LongAdder();
    private final LongAdder rebuildsDone = new LongAdder();
    private final LongAdder resyncsDone = new LongAdder();
    private final LongAdder copiesFailed = new LongAdder();

    public Rebuilder(SlabHost host, int chunkSize) {
        this.host = host;
        this.chunkSize = chunkSize;
        this.zeroChunk = Arena.ofAuto().allocate(chunkSize);
    }

    public void start() {
        cycle = DutyCycle.start(this, BACKOFF);
    }

    /** Queues a slab to have its replicas made identical again (after an unclean exit of the previous bridge). */
    public void resync(Slab s) {
        s.resyncWanted.set(true);
        offer(s);
    }

    /** Queues a slab unless it is queued already. */
    public void offer(Slab s) {
        if (s.rebuildQueued.compareAndSet(false, true)) {
            queue.add(s);
            DutyCycle c = cycle;
            if (c != null) {
                c.wake();
            }
        }
    }

    /** Why the last rebuild could not start (no memserver with room, none reachable), or null while none waits. */
    private volatile String waitingFor;

    /** Why rebuilds wait now, or null: shown by admin, logged when it changes. */
    public String waitingFor() {
        return waitingFor;
    }

    private void waiting(String why) {
        if (!why.equals(waitingFor)) {
            log.warn("rebuild waits: {}; it is tried again every second (add a memserver or capacity)", why);
        }
        waitingFor = why;
    }

    /** The slab being copied now, or null. */
    public Slab current() {
        return current;
    }

    public long copiedBytes() {
        return copiedBytes.sum();
    }

    /** Bytes of {@link #copiedBytes} that held only zeroes and went as ZERO. */
    public long zeroedBytes() {
        return zeroedBytes.sum();
    }

    public long rebuildsDone() {
        return rebuildsDone.sum();
    }

    public long resyncsDone() {
        return resyncsDone.sum();
    }

    /** Rebuilds and resyncs given up (the target or every source failed, or the slab changed under them). */
    public long copiesFailed() {
        return copiesFailed.sum();
    }

    /** Bytes still to copy: the rest of the slab being copied plus every queued slab (progress for metrics). */
    public long remainingBytes() {
        long n = 0;
        for (Slab s : queue) {
            n += s.length;
        }
        Slab c = current;
        if (c != null) {
            n += Math.max(0, c.length - c.rebuildCopied.get());
        }
        return n;
    }

    public int queued() {
        return queue.size();
    }

    @Override
    public String role() {
        return "bridge-rebuild";
    }

    /**
     * Copies the next queued slab, if any and not backing off; rests until {@link #offer} wakes it otherwise.
     *
     * @throws InterruptedException when {@link #close} cuts a copy short ({@link DutyCycle#closeInterrupting})
     */
    @Override
    public long doWork() throws InterruptedException {
        if (!running) {
            return UNTIL_WOKEN;
        }
        long wait = backoffUntilNanos - System.nanoTime();
        if (wait > 0) {
            return wait;
        }
        Slab s = queue.poll();
        if (s == null) {
            return UNTIL_WOKEN;
        }
        s.rebuildQueued.set(false);
        current = s;
        if (buffer == null) {
            buffer = ByteBuffer.allocateDirect(chunkSize);
        }
        try {
            if (!rebuild(s, buffer)) {
                backoffUntilNanos = System.nanoTime() + BACKOFF.toNanos();
            }
        } catch (RuntimeException e) {
            log.error("rebuild of volume {} slab {} failed unexpectedly", s.volume.name(), s.index, e);
            backoffUntilNanos = System.nanoTime() + BACKOFF.toNanos();
        } finally {
            current = null;
        }
        return 0;
    }

    /** Returns false when it could not make progress (no room anywhere, or a failure), so the loop backs off. */
    private boolean rebuild(Slab s, ByteBuffer buffer) throws InterruptedException {
        if (s.volume.fenced() != null) {
            return true; // this bridge no longer serves the volume: its replicas are someone else's now
        }
        if (s.resyncWanted.get()) {
            boolean done = resync(s, buffer);
            if (done) {
                s.resyncWanted.set(false);
            } else {
                offer(s);
            }
            return done;
        }
        ReplicaSet before = s.set;
        if (before == null || before.lost() || before.building != null) {
            return true;
        }
        // Replicas on a draining memserver count until enough others exist; then they are retired (evacuation).
        long staying = before.live.stream().filter(r -> !r.link().draining()).count();
        if (staying >= s.volume.replicas()) {
            for (Replica r : before.live) {
                if (r.link().draining()) {
                    log.info("volume {} slab {}: {} moved off draining memserver {}", s.volume.name(), s.index,
                            r.describe(), r.link().label());
                    s.retire(r, "memserver " + r.link().label() + " is being drained");
                }
            }
            return true;
        }
        Set<MemserverLink> exclude = new HashSet<>();
        before.live.forEach(r -> exclude.add(r.link()));
        Replica target;
        long timeout = host.operationTimeout().toNanos() * 2;
        CompletableFuture<List<Replica>> placing = host.place(s, 1, ReplicaSet.BUILDING, exclude);
        try {
            target = placing.get(timeout, TimeUnit.NANOSECONDS).getFirst();
        } catch (ExecutionException | TimeoutException e) {
            placing.thenAccept(late -> late.forEach(host::release)); // answered after we gave up: give it back
            waiting(Failures.reason(e));
            return false;
        }
        if (waitingFor != null) {
            log.info("rebuild goes on: a memserver took volume {} slab {}", s.volume.name(), s.index);
            waitingFor = null;
        }
        RebuildGate gate = new RebuildGate(s.length, chunkSize);
        ReplicaSet replaced = s.startRebuild(target, gate);
        if (replaced == null) {
            host.release(target);
            return true;
        }
        log.info("volume {} slab {}: {} onto {} ({} bytes)", s.volume.name(), s.index,
                before.live.size() >= s.volume.replicas() ? "copying off a draining memserver" : "rebuilding",
                target.describe(), s.length);
        boolean done = fill(s, target, replaced, gate, buffer, "rebuild");
        if (done && s.set != null && s.set.live.stream().anyMatch(r -> r.link().draining())) {
            offer(s); // the copy is live: the next pass retires the draining one
        }
        return done;
    }

    /**
     * After an unclean exit of the previous bridge, writes that were in flight may have reached some replicas and not
     * others. Each replica but the first is taken out of reading, overwritten from the first (writes go on reaching
     * it) and put back, so every read returns the same bytes whichever replica serves it.
     */
    private boolean resync(Slab s, ByteBuffer buffer) throws InterruptedException {
        while (true) {
            ReplicaSet set = s.set;
            if (set == null || set.lost() || set.live.size() < 2) {
                return true;
            }
            if (set.building != null) {
                return false; // a rebuild is running; come back later
            }
            Replica target = null;
            for (Replica r : set.live.subList(1, set.live.size())) {
                if (!s.resynced.contains(r)) {
                    target = r;
                    break;
                }
            }
            if (target == null) {
                s.resynced.clear();
                return true;
            }
            RebuildGate gate = new RebuildGate(s.length, chunkSize);
            ReplicaSet replaced = s.startResync(target, gate);
            if (replaced == null) {
                return false;
            }
            log.info("volume {} slab {}: resynchronizing {} from {}", s.volume.name(), s.index, target.describe(),
                    replaced.live.getFirst().describe());
            if (!fill(s, target, replaced, gate, buffer, "resync")) {
                return false;
            }
            s.resynced.add(target);
        }
    }

    /** Copies the whole slab into the building replica {@code target} while writes go on, then makes it live. */
    private boolean fill(Slab s, Replica target, ReplicaSet replaced, RebuildGate gate, ByteBuffer buffer, String what)
            throws InterruptedException {
        long timeout = host.operationTimeout().toNanos() * 2;
        long started = System.nanoTime();
        try {
            // Writes issued against the states without the new replica must land before their range is copied.
            for (ReplicaSet p = replaced; p != null; p = p.previous) {
                ReplicaSet state = p;
                await(() -> state.writesInFlight.get() == 0, timeout, "writes in flight before the " + what);
            }
            replaced.previous = null;
            for (int c = 0; c < gate.chunks(); c++) {
                long offset = (long) c * chunkSize;
                int len = (int) Math.min(chunkSize, s.length - offset);
                gate.close(c, timeout);
                try {
                    copy(s, target, offset, len, buffer, timeout);
                } finally {
                    gate.open();
                }
                s.rebuildCopied.set(offset + len);
                copiedBytes.add(len);
            }
            while (true) {
                long generation = s.set.generation;
                target.connection().retag(target.region(), s.tag(target.region().tag().replica(), generation))
                        .get(timeout, TimeUnit.NANOSECONDS);
                Slab.Promotion p = s.promote(target, generation);
                if (p == Slab.Promotion.DONE) {
                    log.info("volume {} slab {}: {} copied {} bytes in {} ms", s.volume.name(), s.index, what, s.length,
                            TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started));
                    (what.equals("resync") ? resyncsDone : rebuildsDone).increment();
                    return true;
                }
                if (p == Slab.Promotion.ABORTED) {
                    copiesFailed.increment();
                    return false;
                }
            }
        } catch (RebuildAborted e) {
            s.abortRebuild(target, e.getMessage());
            copiesFailed.increment();
            return false;
        } catch (ExecutionException | TimeoutException | RuntimeException e) {
            s.abortRebuild(target, what + " failed: " + Failures.reason(e));
            copiesFailed.increment();
            return false;
        }
    }

    /** Copies one chunk from a live replica, trying the others if the source fails. */
    private void copy(Slab s, Replica target, long offset, int len, ByteBuffer buffer, long timeout)
            throws RebuildAborted, InterruptedException {
        MemorySegment chunk = MemorySegment.ofBuffer(buffer).asSlice(0, len);
        while (true) {
            ReplicaSet set = s.set;
            if (!target.equals(set.building)) {
                throw new RebuildAborted("the rebuild target left the slab");
            }
            if (set.lost()) {
                throw new RebuildAborted("no live replica left to copy from");
            }
            Replica source = s.resyncWanted.get() ? set.live.getFirst() : set.forRead();
            try {
                source.connection().read(source.region(), offset, chunk).get(timeout, TimeUnit.NANOSECONDS);
            } catch (ExecutionException | TimeoutException e) {
                s.fail(source, Failures.reason(e));
                continue;
            }
            try {
                // A chunk of zeroes goes as ZERO: the target memserver gives those pages back (or never backs them)
                // instead of filling RAM with zeroes, so rebuilding a sparse slab costs only the data it holds.
                if (chunk.mismatch(zeroChunk.asSlice(0, len)) == -1) {
                    target.connection().zero(target.region(), offset, len).get(timeout, TimeUnit.NANOSECONDS);
                    zeroedBytes.add(len);
                } else {
                    target.connection().write(target.region(), offset, chunk).get(timeout, TimeUnit.NANOSECONDS);
                }
                return;
            } catch (ExecutionException | TimeoutException e) {
                throw new RebuildAborted("writing to " + target.describe() + " failed: " + Failures.reason(e));
            }
        }
    }

    private interface Condition {
        boolean holds();
    }

    private static void await(Condition c, long timeoutNanos, String what)
            throws TimeoutException, InterruptedException {
        long deadline = System.nanoTime() + timeoutNanos;
        while (!c.holds()) {
            if (System.nanoTime() - deadline > 0) {
                throw new TimeoutException(what + " did not finish");
            }
            Thread.sleep(0, 50_000);
        }
    }

    private static final class RebuildAborted extends Exception {
        RebuildAborted(String message) {
            super(message);
        }
    }

    @Override
    public void close() {
        running = false;
        DutyCycle c = cycle;
        if (c != null) {
            // A copy waits on the memservers' futures, never on a channel of its own: the interrupt only ends the wait.
            c.closeInterrupting(Duration.ofSeconds(5));
        }
    }
}
