package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ucx.UcxDataOp.Kind;
import dev.rbridge.rdma.wire.ControlClient;
import org.openucx.jucx.UcxCallback;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpRequest;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;
import java.util.function.Supplier;
import java.util.function.UnaryOperator;

/**
 * A {@link UcxConnection}'s data operations on their way to UCX and back. Callers queue them ({@link #submit}); the
 * progress thread posts everything queued, then one endpoint flush for the PUTs of that batch: a write completes when
 * that flush does (remote completion: the bytes are in the memserver's memory), so a burst of writes costs one flush,
 * not one each. Completions and failures are handed to the connection's completion thread. It also tracks the
 * operations issued but not yet queued (waiting for a remote key, zeroes), which a {@link #flush} waits for.
 */
final class UcxOperationQueue {
    private final String peer;
    private final ControlClient control;
    private final UcxLoop loop;
    private final UcxCompletions completions;
    /** The connection's endpoint; read on the progress thread. */
    private final Supplier<UcpEndpoint> endpoint;
    /** Why the connection is closed, or null while it is open. */
    private final Supplier<RemoteMemoryException> closed;
    /** Closes the connection with a cause, and returns the cause in force. */
    private final UnaryOperator<RemoteMemoryException> closeWith;
    /** Operations issued but not yet on the queue (waiting for a remote key, zeroes): a flush waits for them. */
    private final Set<CompletableFuture<?>> offQueue = ConcurrentHashMap.newKeySet();
    private final ConcurrentLinkedQueue<UcxDataOp> queue = new ConcurrentLinkedQueue<>();
    private final AtomicBoolean drainScheduled = new AtomicBoolean();

    UcxOperationQueue(String peer, ControlClient control, UcxLoop loop, UcxCompletions completions,
            Supplier<UcpEndpoint> endpoint, Supplier<RemoteMemoryException> closed,
            UnaryOperator<RemoteMemoryException> closeWith) {
        this.peer = peer;
        this.control = control;
        this.loop = loop;
        this.completions = completions;
        this.endpoint = endpoint;
        this.closed = closed;
        this.closeWith = closeWith;
    }

    /** Registers {@code op} with the pending calls and queues it; a closed connection fails it. */
    @SuppressWarnings("unchecked")
    CompletableFuture<Void> submit(UcxDataOp op) {
        if (control.register(op)) {
            enqueue(op);
        } else if (op.settled != null) {
            op.settled.run(); // closed: never posted
        }
        return (CompletableFuture<Void>) (CompletableFuture<?>) op.future();
    }

    /** Tracks {@code f}, an operation issued but not queued, until it completes; returns it. */
    <T> CompletableFuture<T> offQueue(CompletableFuture<T> f) {
        offQueue.add(f);
        f.whenComplete((v, e) -> offQueue.remove(f));
        return f;
    }

    /** Submits the endpoint flush {@code op}, completing once it and every operation off the queue before it are. */
    CompletableFuture<Void> flush(UcxDataOp op) {
        CompletableFuture<?>[] before = offQueue.toArray(CompletableFuture[]::new);
        CompletableFuture<Void> epFlush = submit(op);
        if (before.length == 0) {
            return epFlush;
        }
        return CompletableFuture.allOf(before).handle((v, e) -> null).thenCompose(v -> epFlush);
    }

    /** Fails what is queued and not yet posted: UCX never saw it. */
    void failQueued(RemoteMemoryException cause) {
        UcxDataOp op;
        while ((op = queue.poll()) != null) {
            unposted(op, cause);
        }
    }

    private void enqueue(UcxDataOp op) {
        queue.add(op);
        if (drainScheduled.compareAndSet(false, true)) {
            loop.execute(this::drain);
        }
    }

    /** On the progress thread: posts everything queued, then one flush covering the batch's PUTs. */
    private void drain() {
        drainScheduled.set(false);
        List<UcxDataOp> puts = new ArrayList<>();
        UcxDataOp op;
        while ((op = queue.poll()) != null) {
            op.posted = true; // before the check: a backstop that finds it unposted knows it never will be
            if (closed.get() != null) {
                unposted(op, closed.get());
                continue;
            }
            try {
                post(op, puts);
            } catch (RuntimeException e) {
                unposted(op, closeWith.apply(new RemoteMemoryException(Status.CONNECTION_LOST, "UCX refused a "
                        + op.kind + " to memserver " + peer + ": " + e.getMessage(), e)));
            }
        }
        if (!puts.isEmpty()) {
            flushPuts(puts);
        }
    }

    /** Hands {@code op} to UCX; {@code puts} holds the PUTs posted since the batch's last flush. */
    private void post(UcxDataOp op, List<UcxDataOp> puts) {
        UcpEndpoint ep = endpoint.get();
        switch (op.kind) {
            case GET -> {
                ep.getNonBlocking(op.remote, op.rkey, op.local, op.size, callback(op, null));
                loop.posted();
            }
            case PUT -> {
                // Implicit: no request object or upcall per PUT; the batch's flush completes it, or fails the
                // endpoint (and with it every operation) when any PUT of the batch failed.
                ep.putNonBlockingImplicit(op.local, op.size, op.remote, op.rkey);
                puts.add(op);
            }
            case FLUSH -> {
                if (!puts.isEmpty()) {
                    flushPuts(List.copyOf(puts));
                    puts.clear();
                }
                ep.flushNonBlocking(callback(op, null));
                loop.posted();
            }
        }
    }

    private void flushPuts(List<UcxDataOp> puts) {
        try {
            endpoint.get().flushNonBlocking(callback(null,
                    r -> completions.execute(() -> puts.forEach(this::complete))));
            loop.posted();
        } catch (RuntimeException e) {
            var _ = closeWith.apply(new RemoteMemoryException(Status.CONNECTION_LOST,
                    "UCX refused a flush to memserver " + peer + ": " + e.getMessage(), e));
        }
    }

    /**
     * Completes {@code op} on success (a PUT's own success is only local: its flush completes it), or everything on
     * an error: a failed GET, PUT or flush means the endpoint is broken.
     */
    private UcxCallback callback(UcxDataOp op, Consumer<UcpRequest> onSuccess) {
        return new UcxCallback() {
            @Override
            public void onSuccess(UcpRequest request) {
                loop.settled();
                if (op != null && op.settled != null) {
                    op.settled.run();
                }
                if (onSuccess != null) {
                    onSuccess.accept(request);
                } else if (op.kind != Kind.PUT) {
                    completions.execute(() -> complete(op));
                }
            }

            @Override
            public void onError(int ucsStatus, String errorMsg) {
                loop.settled();
                if (op != null && op.settled != null) {
                    op.settled.run();
                }
                RemoteMemoryException e = closed.get() != null ? closed.get()
                        : Ucx.failure(op == null ? "a flush" : "a " + op.kind, peer, ucsStatus, errorMsg);
                if (op != null) {
                    fail(op, e);
                }
                var _ = closeWith.apply(e);
            }
        };
    }

    private void complete(UcxDataOp op) {
        if (control.remove(op)) {
            if (op.after != null) {
                try {
                    op.after.run();
                } catch (RuntimeException e) {
                    op.future().completeExceptionally(e);
                    return;
                }
            }
            op.future().complete(null);
        }
    }

    /** Fails {@code op}; on the completion thread when called on the progress thread. */
    private void fail(UcxDataOp op, RemoteMemoryException e) {
        if (loop.inLoop()) {
            completions.execute(() -> fail(op, e));
        } else if (control.remove(op)) {
            op.future().completeExceptionally(e);
        }
    }

    /** Fails an operation UCX never saw: UCX is done with it too. */
    private void unposted(UcxDataOp op, RemoteMemoryException e) {
        fail(op, e);
        if (op.settled != null) {
            op.settled.run();
        }
    }
}
