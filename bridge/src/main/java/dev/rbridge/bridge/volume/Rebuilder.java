package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.common.Failures;
import dev.rbridge.common.duty.Duty;
import dev.rbridge.common.duty.DutyCycle;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
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
 * replica so every new write reaches it, wait for the writes issued before that to finish, then copy it a window of
 * chunks at a time behind a {@link RebuildGate} ({@link SlabCopy}), at most at the configured rate, and finally tag it
 * with the slab's current generation and make it live.
 */
public final class Rebuilder implements Duty, AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Rebuilder.class);
    /**
     * The rest after a rebuild that could not make progress (no room, a failure) before the next is tried (public for
     * the simulator, module {@code sim}).
     */
    public static final Duration BACKOFF = Duration.ofSeconds(1);
    /** Chunks a copy keeps in flight: a read from one replica and a write to the target overlap several deep. */
    static final int WINDOW = 4;

    private final SlabHost host;
    private final int chunkSize;
    /** A chunk of zeroes, to tell chunks that hold nothing (never written, or trimmed) from the rest. */
    private final MemorySegment zeroChunk;
    private final RebuildPace pace;
    private final LinkedBlockingQueue<Slab> queue = new LinkedBlockingQueue<>();
    private volatile DutyCycle cycle;
    private volatile boolean running = true;
    /** The copy buffers, one per chunk of the window; the duty thread's own, allocated on its first copy. */
    private MemorySegment[] buffers;
    private volatile Slab current;
    private volatile long backoffUntilNanos;
    /** Totals since start, for metrics: bytes copied into new or resynchronized replicas, copies done and failed. */
    private final LongAdder copiedBytes = new LongAdder();
    /** Of those, bytes sent as ZERO (the chunk held only zeroes). */
    private final LongAdder zeroedBytes = new LongAdder();
    private final LongAdder rebuildsDone = new LongAdder();
    private final LongAdder resyncsDone = new LongAdder();
    private final LongAdder copiesFailed = new LongAdder();

    /**
     * @param chunkSize the bytes one read and one write move
     * @param bytesPerSecond the most the copies move a second while clients do I/O, over every slab; 0 for no limit
     */
    public Rebuilder(SlabHost host, int chunkSize, long bytesPerSecond) {
        this.host = host;
        this.chunkSize = chunkSize;
        this.zeroChunk = Arena.ofAuto().allocate(chunkSize);
        this.pace = new RebuildPace(bytesPerSecond, (long) WINDOW * chunkSize, host::clientOperations);
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
        s.volume.lookForDegraded(); // until a walk of its slabs finds none degraded
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
        if (buffers == null) {
            buffers = SlabCopy.buffers(WINDOW, chunkSize);
        }
        try {
            if (!rebuild(s)) {
                backOff(s);
            }
        } catch (RuntimeException e) {
            log.error("rebuild of volume {} slab {} failed unexpectedly", s.volume.name(), s.index, e);
            backOff(s);
        } finally {
            current = null;
        }
        return 0;
    }

    /** No progress on {@code s}: rest a while; the health duty offers it again. */
    private void backOff(Slab s) {
        s.volume.lookForDegraded();
        backoffUntilNanos = System.nanoTime() + BACKOFF.toNanos();
    }

    /** Returns false when it could not make progress (no room anywhere, or a failure), so the loop backs off. */
    private boolean rebuild(Slab s) throws InterruptedException {
        if (s.volume.fenced() != null) {
            return true; // this bridge no longer serves the volume: its replicas are someone else's now
        }
        if (s.resyncWanted.get()) {
            boolean done = resyncReplicas(s);
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
        boolean done = fill(s, target, replaced, gate, "rebuild");
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
    private boolean resyncReplicas(Slab s) throws InterruptedException {
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
            if (!fill(s, target, replaced, gate, "resync")) {
                return false;
            }
            s.resynced.add(target);
        }
    }

    /** Copies the whole slab into the building replica {@code target} while writes go on, then makes it live. */
    private boolean fill(Slab s, Replica target, ReplicaSet replaced, RebuildGate gate, String what)
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
            try {
                new SlabCopy(s, target, gate, pace, buffers, zeroChunk, timeout, copiedBytes, zeroedBytes).run();
            } catch (SlabCopy.RebuildAborted | TimeoutException | RuntimeException | InterruptedException e) {
                buffers = null; // reads still in flight may land in them: the next copy takes new ones
                throw e;
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
        } catch (SlabCopy.RebuildAborted e) {
            s.abortRebuild(target, e.getMessage());
            copiesFailed.increment();
            return false;
        } catch (ExecutionException | TimeoutException | RuntimeException e) {
            s.abortRebuild(target, what + " failed: " + Failures.reason(e));
            copiesFailed.increment();
            return false;
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
