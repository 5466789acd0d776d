package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.wire.ControlClient;
import dev.rbridge.rdma.wire.Opcode;
import org.openucx.jucx.ucp.UcpRemoteKey;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.CompletableFuture;

/**
 * A data operation of a {@link UcxConnection}: a UCX GET, PUT or endpoint flush, completed by UCX, not by a reply, but
 * watched and failed with the control calls.
 */
final class UcxDataOp extends ControlClient.Call {
    /** What UCX does for the operation. */
    enum Kind {
        GET, PUT, FLUSH
    }

    final Kind kind;
    final long remote;
    final UcpRemoteKey rkey;
    final long local;
    final long size;
    /** Kept reachable until completion: the caller's segment, or a native copy of a heap one. */
    final MemorySegment buffer;
    final Runnable after;
    /** Run on the progress thread when UCX is done with the operation, whether it or the connection failed. */
    Runnable settled;
    /**
     * Set by the progress thread just before it hands the operation to UCX: from then on only UCX's completion, or the
     * end of the worker, may fail it, since until then the NIC may still read or write its buffer.
     */
    volatile boolean posted;

    UcxDataOp(long id, Kind kind, long deadline, long remote, UcpRemoteKey rkey, MemorySegment buffer,
            Runnable after) {
        super(id, (kind == Kind.GET ? Opcode.READ : kind == Kind.PUT ? Opcode.WRITE : Opcode.FLUSH).code(),
                deadline, new CompletableFuture<>(), ControlClient.NOTHING);
        this.kind = kind;
        this.remote = remote;
        this.rkey = rkey;
        this.local = buffer == null ? 0 : buffer.address();
        this.size = buffer == null ? 0 : buffer.byteSize();
        this.buffer = buffer;
        this.after = after;
    }

    @Override
    public String what() {
        return kind.name();
    }
}
