package dev.rbridge.rdma.ucx;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.locks.LockSupport;

/**
 * The thread a connection's completions run on, in the order UCX delivered them: the callers' callbacks (an NBD reply
 * written, TLS encryption of it, a page copied out of a staging buffer) never run on the UCX progress thread, which
 * goes back to progressing the worker at once. One per connection; it parks when there is nothing to run, and a
 * completion handed over while it runs costs no wake-up, so a burst of completions costs one.
 */
final class UcxCompletions implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(UcxCompletions.class);

    private final ConcurrentLinkedQueue<Runnable> tasks = new ConcurrentLinkedQueue<>();
    private final Thread thread;
    private volatile boolean parked;
    private volatile boolean closing;
    /** Benchmarks only: tasks run on the caller's thread (the progress thread), as before this class. */
    private final boolean inline;

    UcxCompletions(String name, boolean inline) {
        this.inline = inline;
        thread = new Thread(this::run, name);
        thread.setDaemon(true);
        thread.start();
    }

    /** The thread completions run on. */
    Thread thread() {
        return thread;
    }

    /**
     * Runs {@code task} on the completion thread, after those handed over before it; once closed (the worker is gone,
     * so this is not the progress thread) on the caller's thread.
     */
    void execute(Runnable task) {
        if (closing || inline) {
            task.run();
            return;
        }
        tasks.add(task);
        if (parked) {
            LockSupport.unpark(thread);
        }
    }

    private void run() {
        while (true) {
            Runnable t;
            while ((t = tasks.poll()) != null) {
                try {
                    t.run();
                } catch (Throwable e) {
                    log.error("a completion failed on {}", thread.getName(), e);
                }
            }
            if (closing && tasks.isEmpty()) {
                return;
            }
            parked = true; // before the check: a task added after it sees the flag and unparks
            if (tasks.isEmpty() && !closing) {
                LockSupport.park(this);
            }
            parked = false;
        }
    }

    /** The thread ends once the tasks handed over before this have run. */
    @Override
    public void close() {
        closing = true;
        LockSupport.unpark(thread);
    }
}
