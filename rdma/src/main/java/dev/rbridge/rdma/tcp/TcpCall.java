package dev.rbridge.rdma.tcp;

import dev.rbridge.common.splice.Pipe;
import dev.rbridge.rdma.wire.ControlClient;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageEncoder;
import dev.rbridge.rdma.wire.Protocol;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;

/**
 * A request of a tcp client connection: waiting in the {@link RequestWriter}'s queue until written, and for its reply
 * until the {@link ReplyReader} completes it, with what both need to know of it (WRITE data, the READ destination,
 * and what it weighs on the connection and its socket buffers until answered).
 */
final class TcpCall extends ControlClient.Call {
    final Message request;
    /** What {@link MessageEncoder} writes of {@link #request} into the batch buffer. */
    final int encodedSize;
    /** A WRITE's data, the caller's memory, written after the request; or null. */
    final ByteBuffer data;
    /** A READ's destination, the caller's memory; or null. */
    final MemorySegment dst;
    /**
     * Where a READ's data goes first when the connection can splice, or null: as much as the pipe takes, the rest into
     * {@link #dst}; the call completes with how much went into the pipe.
     */
    final Pipe pipe;
    /** What it adds to the connection's busy bytes (for choosing a lane) until answered. */
    final long weight;
    /** What it may take of our socket's send buffer until answered (see {@link #sendWeight}). */
    final long requestWeight;
    /**
     * What its reply may take of our socket's receive buffer: header and READ data, but at least a page, since a small
     * reply that arrives alone occupies a whole socket buffer (~1 KiB of kernel memory for 24 bytes).
     */
    final long replyWeight;

    /** {@code bodyLength}: the request's, {@link MessageEncoder#bodyLength} (WRITE data included). */
    TcpCall(Message request, long bodyLength, long deadline, MemorySegment data, MemorySegment dst, Pipe pipe,
            ControlClient.Result result, CompletableFuture<Object> future) {
        super(request.id(), request.code(), deadline, future, result);
        this.request = request;
        this.data = data == null ? null : data.asByteBuffer();
        this.encodedSize = (int) (Protocol.HEADER + bodyLength - (data == null ? 0 : data.byteSize()));
        this.dst = dst;
        this.pipe = pipe;
        long requestBytes = Protocol.HEADER + bodyLength;
        this.weight = requestBytes + (dst == null ? 0 : dst.byteSize());
        this.requestWeight = sendWeight(requestBytes);
        this.replyWeight = request instanceof Message.ListRegions ? Protocol.MAX_BODY // a long list of regions
                : Math.max(4096, Protocol.HEADER + (dst == null ? 0 : dst.byteSize()));
    }

    /**
     * What {@code bytes} written in one request may take of a socket's send buffer: the kernel charges buffer overhead
     * too (about a KiB per packet buffer), so at least a page, and a sixteenth more for large writes.
     */
    static long sendWeight(long bytes) {
        return Math.max(4096, bytes + bytes / 16);
    }
}
