package dev.rbridge.rdma.ucx;

import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucp.UcpWorkerParams;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * One UCX worker and the one thread that ever touches it. Other threads hand it tasks ({@link #execute}); it runs
 * them, progresses the worker, and sleeps in {@code waitForEvents} when there is nothing to do (busy polling on both
 * sides collapsed throughput on two cores). A task arriving while it sleeps wakes it with {@code signal}; one arriving
 * while it runs is picked up without one.
 *
 * <p>The sleep trusts UCX to signal every completion, and a completion that never signals would leave its operation
 * waiting for the operation timeout with its data long there. So a connection with operations in flight
 * {@linkplain #kick kicks} a sleeping loop every watchdog period: a missed event then costs one period, not the
 * connection. Kicks that find completions waiting are logged (sparsely): some are a completion that raced the kick, many
 * mean UCX or the NIC's driver did not signal them.
 *
 * <p>While operations it was told of ({@link #posted}, {@link #settled}) are outstanding, it polls for a short budget
 * before sleeping ({@link ProgressSpin}): a completion found by polling costs no wake-up, and a task queued meanwhile
 * needs no signal.
 */
final class UcxLoop implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(UcxLoop.class);

    final UcpWorker worker;
    private final Thread thread;
    private final ConcurrentLinkedQueue<Runnable> tasks = new ConcurrentLinkedQueue<>();
    private volatile boolean sleeping;
    private volatile boolean stopping;
    private volatile boolean kicked;
    private long missedEvents;
    private final ProgressSpin spin;
    /** Operations posted on this worker that will complete through it and have not yet: loop thread only. */
    private int outstanding;
    private final CompletableFuture<Void> stopped = new CompletableFuture<>();

    UcxLoop(UcpContext context, String name) {
        this(context, name, new ProgressSpin(0));
    }

    UcxLoop(UcpContext context, String name, ProgressSpin spin) {
        this.spin = spin;
        this.worker = context.newWorker(new UcpWorkerParams());
        this.thread = new Thread(this::run, name);
        thread.setDaemon(true);
        thread.start();
    }

    Thread thread() {
        return thread;
    }

    boolean inLoop() {
        return Thread.currentThread() == thread;
    }

    /** Its polling policy (tests read what it did). */
    ProgressSpin spin() {
        return spin;
    }

    /** On the loop thread: an operation was posted whose completion will come through this worker. */
    void posted() {
        outstanding++;
    }

    /** On the loop thread: a {@linkplain #posted posted} operation completed or failed. */
    void settled() {
        outstanding--;
    }

    /** Runs {@code task} on the loop thread (later, even when called from it). */
    void execute(Runnable task) {
        tasks.add(task);
        if (sleeping && !inLoop()) {
            wake();
        }
    }

    /** Wakes the loop if it sleeps: a connection waiting for completions calls this each watchdog period. */
    void kick() {
        if (sleeping) {
            kicked = true;
            wake();
        }
    }

    /** Signals the worker unless it is already closed (a signal to a closed worker would crash the JVM). */
    private void wake() {
        synchronized (stopped) {
            if (!stopped.isDone()) {
                worker.signal();
            }
        }
    }

    /** Runs {@code task} on the loop thread and waits for its result. */
    <T> T call(Callable<T> task, long timeoutMillis) throws Exception {
        if (inLoop()) {
            return task.call();
        }
        CompletableFuture<T> f = new CompletableFuture<>();
        execute(() -> {
            try {
                f.complete(task.call());
            } catch (Throwable e) {
                f.completeExceptionally(e);
            }
        });
        try {
            return f.get(timeoutMillis, TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Exception x) {
                throw x;
            }
            throw e;
        } catch (TimeoutException e) {
            throw new TimeoutException("the UCX progress thread " + thread.getName() + " did not answer in "
                    + timeoutMillis + " ms");
        }
    }

    private void run() {
        try {
            while (true) {
                Runnable t;
                boolean ran = false;
                while ((t = tasks.poll()) != null) {
                    ran = true;
                    try {
                        t.run();
                    } catch (Throwable e) {
                        log.error("UCX task failed on {}", thread.getName(), e);
                    }
                }
                if (stopping && tasks.isEmpty()) {
                    break;
                }
                int events;
                try {
                    events = worker.progress();
                } catch (Exception e) {
                    log.warn("UCX progress failed on {}: {}", thread.getName(), e.toString());
                    events = 0;
                }
                if (kicked) {
                    kicked = false;
                    if (events > 0 && Long.bitCount(++missedEvents) == 1) { // the 1st, 2nd, 4th, 8th...
                        log.info("UCX progress thread {}: the watchdog's periodic wake found completions waiting "
                                + "({} time(s) so far); UCX may not have signalled them", thread.getName(),
                                missedEvents);
                    }
                }
                if (events > 0 || ran) {
                    spin.worked();
                }
                if (events == 0 && tasks.isEmpty()) {
                    // The clock is read only when polling may follow: where it is not the vDSO's (some VMs) each
                    // read is a system call.
                    if (!stopping && outstanding > 0 && spin.enabled()
                            && spin.pollAgain(outstanding, System.nanoTime())) {
                        Thread.onSpinWait();
                        continue;
                    }
                    sleeping = true;
                    if (tasks.isEmpty() && !stopping) {
                        worker.waitForEvents();
                    }
                    sleeping = false;
                }
            }
        } finally {
            synchronized (stopped) {
                try {
                    worker.close();
                } catch (Throwable e) {
                    log.debug("closing the UCX worker failed", e);
                }
                stopped.complete(null);
            }
        }
    }

    /**
     * Completes once the worker is closed: UCX then holds no buffer of any operation posted on it, whether or not
     * the operation completed.
     */
    CompletableFuture<Void> stopped() {
        return stopped.copy();
    }

    /** Stops after the tasks already queued; closes the worker. Waits a little unless called from the loop. */
    @Override
    public void close() {
        stopping = true;
        wake();
        if (!inLoop()) {
            try {
                stopped.get(5, TimeUnit.SECONDS);
            } catch (Exception e) {
                log.warn("UCX progress thread {} did not stop in time", thread.getName());
            }
        }
    }
}
