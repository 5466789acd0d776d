package dev.rbridge.rdma;

import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.slf4j.Logger;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The life of a client connection, the same for every provider: open until the first cause to close it, which then
 * stays in force; every later operation fails with it at once, and the provider's teardown ({@link #tearDown}) runs
 * exactly once, on the thread that closed it. What the teardown does (closing sockets or endpoints, failing what is
 * pending) is the provider's.
 */
public abstract class ConnectionLifecycle implements RemoteConnection {
    private final AtomicReference<RemoteMemoryException> closed = new AtomicReference<>();
    /** The memserver as a sentence names it: "memserver host:port". */
    private final String memserver;

    /** {@code memserver}: how the memserver reads in a sentence ("memserver 10.0.0.5:7471"). */
    protected ConnectionLifecycle(String memserver) {
        this.memserver = memserver;
    }

    @Override
    public final boolean isOpen() {
        return closed.get() == null;
    }

    /** Why this connection closed, or null while it is open. */
    protected final RemoteMemoryException closedCause() {
        return closed.get();
    }

    /** A future failed with the cause in force when this connection is closed, else null: go on and issue. */
    protected final <T> CompletableFuture<T> failedIfClosed() {
        RemoteMemoryException dead = closed.get();
        return dead == null ? null : CompletableFuture.failedFuture(dead);
    }

    @Override
    public final void close() {
        closeWith(new RemoteMemoryException(Status.CONNECTION_LOST, "connection to " + memserver
                + " was closed by this client"));
    }

    /** Closes once with {@code cause}, tearing down; returns the cause in force (the first one). */
    protected final RemoteMemoryException closeWith(RemoteMemoryException cause) {
        if (!markClosed(cause)) {
            return closed.get();
        }
        tearDown(cause);
        return cause;
    }

    /**
     * The close-once step alone, for a provider that tears down otherwise than {@link #tearDown} on some path: true
     * when {@code cause} closed this connection (the caller then tears down), false when it was closed already.
     */
    protected final boolean markClosed(RemoteMemoryException cause) {
        return closed.compareAndSet(null, cause);
    }

    /** Tears the connection down after {@link #closeWith} closed it with {@code cause}; runs once. */
    protected abstract void tearDown(RemoteMemoryException cause);

    /**
     * The log line of a close that failed {@code failed} pending operations: a warning when they were lost or the
     * cause was more than the connection's end, else (a quiet close) at debug.
     */
    protected static void logClosed(Logger log, RemoteMemoryException cause, int failed) {
        if (cause.status() != Status.CONNECTION_LOST || failed > 0) {
            log.warn("{} ({} pending operation(s) failed)", cause.getMessage(), failed);
        } else {
            log.debug("{}", cause.getMessage());
        }
    }
}
