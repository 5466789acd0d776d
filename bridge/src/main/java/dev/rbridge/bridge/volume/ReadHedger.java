package dev.rbridge.bridge.volume;

import dev.rbridge.common.duty.Duty;
import dev.rbridge.common.duty.DutyCycle;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Hedged reads: Hydra's late binding applied to replicas. A read piece of up to {@link #MAX_HEDGED_BYTES} on a slab
 * with two or more live replicas goes to the replica whose memserver has the fewest operations in flight; when it has
 * not answered within its volume's hedge delay ({@link ReadLatency}), the same read goes to another live replica and
 * whichever answers first is the one returned ({@link HedgedRead}). Writes are acknowledged only once every live
 * replica has them, so either answer holds every write acknowledged before the read was sent.
 *
 * <p>One thread per bridge with one duty ({@link DutyCycle}): it watches the reads that may need a hedge in the
 * order they were sent, hedges those whose deadline has passed, and sleeps until the next deadline (at least
 * {@link #MIN_SLEEP_NANOS}). With nothing watched it goes on waking every {@link #EMPTY_TICK_NANOS} for
 * {@link #IDLE_AFTER_NANOS}, then parks until a read arrives: a busy volume's reads cost no wake-up, and a read is
 * hedged at most about one tick after its deadline. Deadlines of different volumes are not sorted among each other;
 * a read behind one with a later deadline is hedged late by at most the difference.
 *
 * <p>A memserver whose read a hedge beat is avoided by reads for {@link #AVOID_AFTER_HEDGE_WON_NANOS} when another
 * replica is live (ReplicaSet#forRead): a memserver that stalls does so in bursts.
 *
 * <p>Bounds: at most {@link #MAX_WATCHED} reads are watched at once and {@link #MAX_SCRATCH_BYTES} of scratch memory is
 * in use (beyond either a read is not hedged), and hedges are rationed to {@link #HEDGE_SHARE} of reads (a tenth of a
 * token per read, bursts of {@link #HEDGE_BURST}), so a memserver that is slow for good doubles no one's load.
 */
public final class ReadHedger implements Duty, AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(ReadHedger.class);

    /** Larger reads are bandwidth, not latency: they go straight into the caller's buffer and are never hedged. */
    public static final int MAX_HEDGED_BYTES = 128 << 10;
    /** Scratch memory in use at once, over every volume. */
    static final long MAX_SCRATCH_BYTES = 64L << 20;
    /** How long reads prefer other replicas over a memserver whose read a hedge beat. */
    static final long AVOID_AFTER_HEDGE_WON_NANOS = 20_000_000;
    /** Most reads watched at once. */
    static final int MAX_WATCHED = 16384;
    /** The share of reads that may be hedged over time. */
    static final double HEDGE_SHARE = 0.1;
    /** Hedges that may go out back to back before the share applies. */
    static final double HEDGE_BURST = 16;
    /** The shortest sleep between duty cycles: deadlines closer together than this are served together. */
    static final long MIN_SLEEP_NANOS = 100_000;
    /** How often the hedger looks for reads while it watches none (the most a read is hedged late). */
    static final long EMPTY_TICK_NANOS = 200_000;
    /** How long the hedger goes on ticking with nothing watched before it parks until a read arrives. */
    static final long IDLE_AFTER_NANOS = 20_000_000;

    private final ConcurrentLinkedQueue<HedgedRead> watched = new ConcurrentLinkedQueue<>();
    private final AtomicInteger watchedCount = new AtomicInteger();
    private final ScratchBuffers scratch = new ScratchBuffers(MAX_HEDGED_BYTES, MAX_SCRATCH_BYTES);
    private final DutyCycle cycle;
    /** Parked with nothing watched: a read watched now wakes the hedger. */
    private volatile boolean idle;
    /** Since when nothing has been watched (System.nanoTime), 0 while something is; the hedger's own. */
    private long emptySince;
    private volatile boolean closed;
    /** Hedge tokens: a tenth per read watched, one spent per hedge; touched by the hedger only. */
    private double tokens = HEDGE_BURST;
    /** Reads watched since the hedger last added tokens: written by senders, taken by the hedger. */
    private final AtomicInteger readsSinceRefill = new AtomicInteger();

    public ReadHedger() {
        cycle = DutyCycle.start(this, Duration.ofNanos(EMPTY_TICK_NANOS));
    }

    ScratchBuffers scratch() {
        return scratch;
    }

    /** Watches {@code read} for its deadline; false (not watched: it is not hedged) when too many are watched. */
    boolean watch(HedgedRead read) {
        if (closed) {
            return false;
        }
        if (watchedCount.incrementAndGet() > MAX_WATCHED) {
            watchedCount.decrementAndGet();
            return false;
        }
        readsSinceRefill.incrementAndGet();
        watched.add(read);
        if (idle) {
            cycle.wake();
        }
        return true;
    }

    @Override
    public String role() {
        return "rbridge-read-hedger";
    }

    /** A duty cycle now; then ticks while nothing is watched, and parks (idle) once that lasted a while. */
    @Override
    public long doWork() {
        if (idle) { // set only before a park: written once per wake-up, not every cycle
            idle = false;
        }
        long now = System.nanoTime();
        long sleep = doWork(now);
        if (sleep >= 0) {
            emptySince = 0;
            return sleep;
        }
        if (emptySince == 0 || now - emptySince < IDLE_AFTER_NANOS) {
            emptySince = emptySince == 0 ? now : emptySince;
            return EMPTY_TICK_NANOS;
        }
        idle = true;
        if (!watched.isEmpty() || closed) { // re-checked after idle is visible: a watch from now on wakes us
            idle = false;
            return 0;
        }
        emptySince = 0;
        return UNTIL_WOKEN;
    }

    /**
     * One duty cycle at {@code now}: drops answered reads from the head and hedges the overdue ones. Returns how long
     * to sleep until the head's deadline (at least {@link #MIN_SLEEP_NANOS}), or -1 when nothing is watched.
     */
    long doWork(long now) {
        int reads = readsSinceRefill.get();
        if (reads != 0) { // taken only when there are some: no atomic write in a cycle without reads
            readsSinceRefill.addAndGet(-reads);
            tokens = Math.min(HEDGE_BURST, tokens + reads * HEDGE_SHARE);
        }
        HedgedRead r;
        while ((r = watched.peek()) != null) {
            if (r.waiting()) {
                long left = r.deadline() - now;
                if (left > 0) {
                    return Math.max(left, MIN_SLEEP_NANOS);
                }
                if (tokens >= 1 && r.hedge()) {
                    tokens -= 1;
                }
            }
            watched.poll(); // r: only this thread takes from the queue
            watchedCount.decrementAndGet();
        }
        return -1;
    }

    @Override
    public void close() {
        closed = true;
        if (!cycle.close(Duration.ofSeconds(2))) {
            log.warn("the read hedger did not stop in time");
        }
    }
}
