package dev.rbridge.common.duty;

import dev.rbridge.common.Durations;
import dev.rbridge.common.RateLimitedLog;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.locks.LockSupport;

/**
 * Runs a {@link Duty} on a platform daemon thread named for its role until {@link #close}, with one exception policy
 * for every periodic loop of the project:
 * <ul>
 * <li>an {@link Exception} from a cycle is logged (at most one line per five seconds, with the count of those left
 *     out) and the thread rests the back-off before the next cycle: a failure that repeats must neither spin nor
 *     flood the log;</li>
 * <li>an {@link Exception} from a cycle that a close cut short, {@link InterruptedException} from
 *     {@link #closeInterrupting} above all, ends the thread without a word: it is the close, not a failure;</li>
 * <li>an {@link Error} (out of memory, a bug in a native binding) ends the role: the thread logs that the role
 *     stopped and why, and {@link #stoppedBy} answers it, so whoever reports health can say so.</li>
 * </ul>
 * {@link #close} never interrupts the thread (an interrupt closes any NIO channel the duty is using); it stops the
 * cycles, wakes the thread and waits for the cycle under way, up to a bound. A duty whose cycle waits only on futures
 * and locks, never on a channel, may be closed with {@link #closeInterrupting} instead, which also ends that wait.
 */
public final class DutyCycle implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(DutyCycle.class);

    private final Duty duty;
    private final long backoffNanos;
    private final RateLimitedLog failures;
    private final Thread thread;
    private volatile boolean running = true;
    private volatile Throwable stoppedBy;

    private DutyCycle(Duty duty, Duration backoff) {
        this.duty = Objects.requireNonNull(duty, "duty");
        if (backoff.isNegative() || backoff.isZero()) {
            throw new IllegalArgumentException("the back-off after a failed cycle must be positive: " + backoff);
        }
        this.backoffNanos = backoff.toNanos();
        this.failures = new RateLimitedLog(log);
        this.thread = Thread.ofPlatform().name(duty.role()).daemon().unstarted(this::run);
    }

    /** Starts {@code duty}'s cycles now; a failed cycle is followed by a rest of {@code backoff}. */
    public static DutyCycle start(Duty duty, Duration backoff) {
        DutyCycle c = new DutyCycle(duty, backoff);
        c.thread.start();
        return c;
    }

    /** Ends the rest under way, if any: the next cycle runs now. Cheap; callable from any thread. */
    public void wake() {
        LockSupport.unpark(thread);
    }

    /** Whether the cycles go on: not closed, and no {@link Error} ended them. */
    public boolean running() {
        return running && stoppedBy == null && thread.isAlive();
    }

    /** The error that ended the role, or null. */
    public Throwable stoppedBy() {
        return stoppedBy;
    }

    /** The thread the cycles run on (for tests and thread dumps). */
    public Thread thread() {
        return thread;
    }

    @Override
    public void close() {
        close(Duration.ofSeconds(5));
    }

    /** Stops the cycles and waits up to {@code wait} for the one under way; answers whether the thread ended. */
    public boolean close(Duration wait) {
        running = false;
        LockSupport.unpark(thread);
        if (Thread.currentThread() == thread) {
            return false; // closed from its own cycle: the loop ends when the cycle returns
        }
        try {
            return thread.join(wait);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return !thread.isAlive();
        }
    }

    /**
     * Stops the cycles, interrupts the cycle under way and waits up to {@code wait} for it; answers whether the thread
     * ended. Only for a duty whose cycle waits on futures and locks, never on a channel of its own (an interrupt
     * closes the channel). The cycles are stopped before the interrupt, so what the interrupt makes the cycle throw
     * ends the thread quietly.
     */
    public boolean closeInterrupting(Duration wait) {
        running = false;
        thread.interrupt();
        return close(wait);
    }

    private void run() {
        while (running) {
            long rest;
            try {
                rest = duty.doWork();
            } catch (Exception e) {
                if (!running) {
                    break;
                }
                failures.error("cycle", "{}: a duty cycle failed; the next one in {}", duty.role(),
                        Durations.human(Duration.ofNanos(backoffNanos)), e);
                rest = backoffNanos;
            } catch (Error e) {
                stoppedBy = e;
                log.error("{}: stopped: its duty cycle failed with an error it cannot go on after", duty.role(), e);
                try {
                    duty.onStopped(e);
                } catch (RuntimeException | Error x) {
                    e.addSuppressed(x);
                    log.error("{}: reporting that it stopped failed too", duty.role(), x);
                }
                return;
            }
            if (!running) {
                break;
            }
            if (Thread.interrupted()) {
                // Nobody here interrupts a duty thread; a stray interrupt must not turn every rest into a spin.
                log.debug("{}: interrupt ignored", duty.role());
            }
            if (rest < 0) {
                LockSupport.park(this);
            } else if (rest > 0) {
                LockSupport.parkNanos(this, rest);
            }
        }
    }
}
