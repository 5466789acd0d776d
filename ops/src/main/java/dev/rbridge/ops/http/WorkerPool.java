package dev.rbridge.ops.http;

import dev.rbridge.common.Durations;

import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The bounded worker pool that computes one server's answers: {@link OpsHttpConfig#workers()} threads and a queue
 * of {@link OpsHttpConfig#queue()} requests. A worker stuck in a handler past the handler timeout is written off and
 * replaced, until its handler returns; at most as many at a time as there are workers.
 */
final class WorkerPool {
    private final OpsHttpConfig config;
    private final Handler handler;
    private final RefusalLog refusals;
    private final SelectorHandOff handOff;
    private final ThreadPoolExecutor executor;
    // selector thread only
    /** Workers written off (stuck in a handler past its deadline) and replaced, until their handler returns. */
    private int replaced;

    WorkerPool(OpsHttpConfig config, Handler handler, RefusalLog refusals, SelectorHandOff handOff) {
        this.config = config;
        this.handler = handler;
        this.refusals = refusals;
        this.handOff = handOff;
        AtomicInteger n = new AtomicInteger();
        this.executor = new ThreadPoolExecutor(config.workers(), config.workers(), 0, TimeUnit.MILLISECONDS,
                new ArrayBlockingQueue<>(config.queue()), r -> {
                    Thread t = new Thread(r, "ops-http-" + config.name() + "-worker-" + n.incrementAndGet());
                    t.setDaemon(true);
                    return t;
                }, new ThreadPoolExecutor.AbortPolicy());
    }

    OpsHttpConfig config() {
        return config;
    }

    Handler handler() {
        return handler;
    }

    RefusalLog refusals() {
        return refusals;
    }

    /** Hands work to the selector thread. */
    void post(Runnable r) {
        handOff.post(r);
    }

    /**
     * Selector thread: queues the job.
     *
     * @throws RejectedExecutionException when every worker is busy and the queue is full
     */
    void execute(HandlerJob job) {
        executor.execute(job);
    }

    /** Selector thread: takes a job out of the queue (cut off before a worker took it). */
    void remove(HandlerJob job) {
        executor.remove(job);
    }

    /** The worker threads the pool may run now: its size plus one per replaced worker still stuck. */
    int threads() {
        return executor.getCorePoolSize();
    }

    /**
     * Selector thread: a worker stays in a handler past the handler timeout. A thread cannot be stopped, only
     * interrupted (a handler blocked in an interruptible wait returns); so it is written off, and the pool grows by
     * one in its place, until its handler returns ({@link #retire}). At most {@link OpsHttpConfig#workers()}
     * threads are replaced at a time: beyond that, hung handlers cost answers (503), never more threads.
     */
    void writeOff(HandlerJob job) {
        Thread t = job.runner();
        if (t != null) {
            t.interrupt();
        }
        String stuck = "a worker is still in " + job.what() + " after "
                + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - job.startedAt()) + " ms, at the "
                + Durations.human(config.handlerTimeout()) + " handler timeout; ";
        if (replaced < config.workers()) {
            replaced++;
            job.replaced = true;
            executor.setMaximumPoolSize(executor.getMaximumPoolSize() + 1);
            executor.setCorePoolSize(executor.getCorePoolSize() + 1);
            refusals.error("worker-written-off", stuck + "written off and replaced (" + replaced
                    + " replaced until their handlers return)");
        } else {
            refusals.error("worker-written-off", stuck + "written off, not replaced: " + replaced
                    + " replaced already");
        }
    }

    /** Selector thread: the handler of a written-off worker returned; the pool gives back the thread it added. */
    void retire(HandlerJob job) {
        if (job.replaced) {
            job.replaced = false;
            replaced--;
            executor.setCorePoolSize(executor.getCorePoolSize() - 1);
            executor.setMaximumPoolSize(executor.getMaximumPoolSize() - 1);
        }
    }

    /** Stops the workers, interrupting those in a handler. */
    void shutdownNow() {
        executor.shutdownNow();
    }
}
