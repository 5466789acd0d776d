package dev.rbridge.ops.http;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One request on its way through the {@link WorkerPool}. The selector thread and the worker that runs it agree
 * through {@link #phase} on who ends it: the worker by finishing (DONE, its answer handed to the selector thread),
 * or the selector thread by cutting it off at the handler timeout (CUT_OFF, a 503 already sent); whichever comes
 * second only cleans up.
 */
final class HandlerJob implements Runnable {
    /** The server's one logger, named for {@link OpsHttpServer} as operators configure it. */
    private static final Logger log = LoggerFactory.getLogger(OpsHttpServer.class);
    private static final int QUEUED = 0;
    private static final int RUNNING = 1;
    private static final int DONE = 2;
    private static final int CUT_OFF = 3;

    private final HttpConnection conn;
    private final HttpRequest request;
    private final WorkerPool pool;
    private final OpsHttpConfig config;
    final boolean head;
    final boolean close;
    private final AtomicInteger phase = new AtomicInteger(QUEUED);
    private volatile Thread runner;
    private volatile long startedAt;
    // written by the worker before DONE, read by the selector thread after it
    private ByteBuffer bytes;
    private Runnable afterSent;
    // selector thread only
    /** Whether the pool added a thread in this job's worker's place ({@link WorkerPool#writeOff}). */
    boolean replaced;

    HandlerJob(HttpConnection conn, HttpRequest request, WorkerPool pool) {
        this.conn = conn;
        this.request = request;
        this.pool = pool;
        this.config = pool.config();
        this.head = request.method().equals("HEAD");
        this.close = !request.keepAlive();
    }

    /** On a worker. Never throws: whatever happens, the selector thread hears of it. */
    @Override
    public void run() {
        startedAt = System.nanoTime(); // before RUNNING: whoever sees RUNNING sees these
        runner = Thread.currentThread();
        if (!phase.compareAndSet(QUEUED, RUNNING)) {
            return; // cut off while it waited in the queue: its peer has its 503
        }
        try {
            HttpResponse response = compute();
            ByteBuffer encoded;
            try {
                encoded = response.encode(head, close);
            } catch (RuntimeException | Error e) { // never leave a connection waiting for an answer
                pool.refusals().counted(Refusal.INTERNAL_ERROR);
                log.error("ops http {}: the answer to {} cannot be encoded", config.name(), what(), e);
                response = config.errorPage().render(500, "internal error: the answer cannot be encoded");
                encoded = response.encode(head, close);
            }
            bytes = encoded;
            afterSent = response.afterSent();
        } catch (Throwable t) { // not even a 500 could be made (out of memory, typically): the connection closes
            bytes = null;
            afterSent = null;
            try {
                log.error("ops http {}: no answer could be made to {}; closing its connection", config.name(),
                        what(), t);
            } catch (Throwable ignored) {
                // nothing left to say it with
            }
        } finally {
            runner = null;
            pool.post(phase.compareAndSet(RUNNING, DONE) ? this::deliver : () -> pool.retire(this));
        }
    }

    /** The handler's answer; whatever it throws, {@link Error}s included, is an answer too. */
    private HttpResponse compute() {
        try {
            HttpResponse response = pool.handler().handle(request);
            if (response == null) {
                throw new IllegalStateException("the handler gave no answer to " + what());
            }
            return response;
        } catch (HttpError e) {
            pool.refusals().refused(e.refusal(), "refused " + what() + " from " + request.peer() + ": "
                    + e.getMessage());
            return HttpConnection.render(config, e);
        } catch (Throwable e) { // StackOverflowError and OutOfMemoryError too: the peer gets its 500
            if (phase.get() != CUT_OFF) { // else it is our interrupt, and the peer was told and counted
                pool.refusals().counted(Refusal.INTERNAL_ERROR);
                log.error("ops http {}: {} failed", config.name(), what(), e);
            }
            return config.errorPage().render(500, "internal error: " + e);
        }
    }

    /** The request for log lines: method and path, printable. */
    String what() {
        return AdminRules.printable(request.method()) + " " + AdminRules.printable(request.path());
    }

    /** The worker in the handler now, or null. */
    Thread runner() {
        return runner;
    }

    /** When a worker took the job. */
    long startedAt() {
        return startedAt;
    }

    /**
     * Selector thread, at the handler timeout: cuts the request off unless it is done (then false). A request
     * still queued leaves the queue; a worker still in the handler is interrupted and written off.
     */
    boolean cutOff() {
        int was = phase.getAndUpdate(p -> p == DONE ? DONE : CUT_OFF);
        switch (was) {
            case DONE -> {
                return false;
            }
            case QUEUED -> pool.remove(this);
            default -> pool.writeOff(this);
        }
        return true;
    }

    /** Selector thread: hands the answer to the connection, once (the worker's hand-off or the timeout). */
    void deliver() {
        conn.answered(this, bytes, afterSent);
    }
}
