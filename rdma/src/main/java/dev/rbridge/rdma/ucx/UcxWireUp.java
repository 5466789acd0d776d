package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ucx.UcxDataOp.Kind;
import dev.rbridge.rdma.wire.ControlClient;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.Protocol;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpRemoteKey;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;

/**
 * The end of a {@link UcxConnection}'s connect: UCX's wire-up over both ways. The client reads the memserver's probe
 * word over its new endpoint and flushes the endpoint, so no client of this provider ever leaves while the memserver
 * still owes its endpoint a wire-up reply (UCX 1.13 aborts the memserver's process when such a client goes away).
 * Until the wire-up is {@link #isOver over} a close keeps the endpoint.
 */
final class UcxWireUp {
    private static final Logger log = LoggerFactory.getLogger(UcxConnection.class);
    /** The probe word as it is in the memserver's memory (see {@link Protocol#UCX_PROBE_WORD}). */
    private static final ValueLayout.OfLong PROBE_WORD = ValueLayout.JAVA_LONG.withOrder(ByteOrder.LITTLE_ENDIAN);

    private final String peer;
    private final long timeoutNanos;
    private final ControlClient control;
    private final UcxLoop loop;
    private final UcxOperationQueue ops;
    /** The connection's endpoint; read on the progress thread. */
    private final Supplier<UcpEndpoint> endpoint;
    /** The probe word's remote key while the probe may use it; the progress thread's only. */
    private UcpRemoteKey probeKey;
    /** Where the probe word lands; reachable while UCX may write it. */
    private final MemorySegment probeBuffer = Arena.ofAuto().allocate(8, 8);
    /**
     * Completed by UCX, success or failure, when the wire-up flush is over: until then the memserver may owe this
     * endpoint a wire-up reply, and the endpoint is not closed.
     */
    private final CompletableFuture<Void> wiredUp = new CompletableFuture<>();

    UcxWireUp(String peer, long timeoutNanos, ControlClient control, UcxLoop loop, UcxOperationQueue ops,
            Supplier<UcpEndpoint> endpoint) {
        this.peer = peer;
        this.timeoutNanos = timeoutNanos;
        this.control = control;
        this.loop = loop;
        this.ops = ops;
        this.endpoint = endpoint;
    }

    /**
     * Reads the probe word over the new endpoint and flushes the endpoint, on the progress thread, and waits for both.
     * A read needs the memserver's endpoint ID, which comes with its wire-up reply, so UCX holds it until that reply
     * is in; the flush waits for every lane still in wire-up. Either failing, or taking longer than
     * {@code timeoutMillis} (the operations themselves are bounded by the operation timeout), fails the connect: the
     * caller closes the connection. {@code probe} is null from a memserver that predates UCX_PROBE.
     */
    void await(Message.UcxProbeReply probe, long timeoutMillis) throws RemoteMemoryException {
        long deadline = System.nanoTime() + timeoutNanos;
        CompletableFuture<Void> read = new CompletableFuture<>();
        CompletableFuture<Void> flushed = new CompletableFuture<>();
        loop.execute(() -> start(probe, deadline, read, flushed));
        try {
            CompletableFuture.allOf(read, flushed).get(timeoutMillis, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "UCX wire-up with memserver " + peer
                    + " did not complete within " + timeoutMillis + " ms");
        } catch (ExecutionException e) {
            Throwable why = e.getCause();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "UCX wire-up with memserver " + peer
                    + " failed: " + why.getMessage(), why);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "interrupted while UCX wired up with memserver "
                    + peer);
        }
        long word = probeBuffer.get(PROBE_WORD, 0);
        if (probe != null && word != Protocol.UCX_PROBE_WORD) {
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "memserver " + peer + "'s probe word read over "
                    + "UCX as 0x" + Long.toHexString(word) + ", not 0x" + Long.toHexString(Protocol.UCX_PROBE_WORD)
                    + ": UCX does not reach the memory the memserver registered");
        }
    }

    /** On the progress thread: posts the probe's GET (when there is a probe) and the wire-up flush. */
    private void start(Message.UcxProbeReply probe, long deadline, CompletableFuture<Void> read,
            CompletableFuture<Void> flushed) {
        try {
            if (probe == null) {
                read.complete(null);
            } else {
                probeKey = endpoint.get().unpackRemoteKey(UcxRemoteKeys.direct(probe.remoteKey().buffer()));
                ops.submit(new UcxDataOp(control.nextId(), Kind.GET, deadline, probe.address(), probeKey,
                        probeBuffer, () -> loop.execute(this::closeProbeKey))).whenComplete((v, e) -> settle(read, e));
            }
            UcxDataOp flush = new UcxDataOp(control.nextId(), Kind.FLUSH, deadline, 0, null, null, null);
            flush.settled = () -> wiredUp.complete(null);
            ops.submit(flush).whenComplete((v, e) -> settle(flushed, e));
        } catch (RuntimeException e) { // UCX would not take the probe's key: nothing of it was posted
            wiredUp.complete(null);
            read.completeExceptionally(e);
            flushed.completeExceptionally(e);
        }
    }

    /** Whether the wire-up flush is over: the memserver owes the endpoint nothing any more. */
    boolean isOver() {
        return wiredUp.isDone();
    }

    /** Completes when the wire-up flush is over, or after {@code lingerMillis} at the latest. */
    CompletableFuture<Void> over(long lingerMillis) {
        return wiredUp.completeOnTimeout(null, lingerMillis, TimeUnit.MILLISECONDS);
    }

    /** On the progress thread: the probe word's remote key, once the probe no longer needs it. */
    void closeProbeKey() {
        UcpRemoteKey k = probeKey;
        probeKey = null;
        if (k != null) {
            try {
                k.close();
            } catch (RuntimeException e) {
                log.debug("rkey destroy failed", e);
            }
        }
    }

    private static void settle(CompletableFuture<Void> f, Throwable e) {
        if (e == null) {
            f.complete(null);
        } else {
            f.completeExceptionally(e);
        }
    }
}
