package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.wire.Protocol;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The word a ucx memserver lets every admitted client read (UCX_PROBE): {@link Protocol#UCX_PROBE_WORD}, alone on a
 * page of its own, registered with UCX for the listener's life. A client reads it over its new endpoint before its
 * connect completes, which proves the data path and ends UCX's wire-up both ways.
 */
final class UcxProbeWord {
    private static final Logger log = LoggerFactory.getLogger(UcxProbeWord.class);
    private static final long PAGE = 4096;

    private final Arena arena = Arena.ofShared();
    private final MemorySegment word;
    private final UcpMemory memory;
    private final ByteBuffer remoteKey;

    /** Registers the word; on the listener's progress thread. */
    UcxProbeWord(UcpContext context) {
        word = arena.allocate(PAGE, PAGE).asSlice(0, Long.BYTES);
        word.set(ValueLayout.JAVA_LONG.withOrder(ByteOrder.LITTLE_ENDIAN), 0, Protocol.UCX_PROBE_WORD);
        try {
            memory = context.memoryMap(new UcpMemMapParams().setAddress(word.address()).setLength(Long.BYTES));
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
        remoteKey = memory.getRemoteKeyBuffer();
    }

    long address() {
        return word.address();
    }

    /** The packed remote key (a view: the caller may read it, never write it). */
    ByteBuffer remoteKey() {
        return remoteKey.asReadOnlyBuffer();
    }

    /** Deregisters, then frees the page; on the progress thread. Memory UCX may still use is never freed. */
    void close() {
        try {
            memory.deregister();
        } catch (Throwable e) {
            log.warn("UCX could not deregister the probe word: {}", e.toString());
            return;
        }
        arena.close();
    }
}
