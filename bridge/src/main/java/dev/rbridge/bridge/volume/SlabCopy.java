package dev.rbridge.bridge.volume;

import dev.rbridge.common.Failures;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.LongAdder;

/**
 * The copy of one slab into its building replica, a window of chunks at a time: each chunk is closed in the
 * {@link RebuildGate}, read from a live replica (another one if that fails) and written to the target (a chunk of
 * zeroes as ZERO, so the target memserver gives those pages back instead of filling RAM with zeroes). The chunks land
 * in order: the gate opens behind the oldest, and a buffer is used again only after its chunk has landed. Runs on the
 * rebuild thread; the reads and writes of the window overlap on the memservers.
 */
final class SlabCopy {
    private final Slab slab;
    private final Replica target;
    private final RebuildGate gate;
    private final RebuildPace pace;
    private final MemorySegment[] buffers;
    private final MemorySegment zeroChunk;
    private final long timeoutNanos;
    private final LongAdder copiedBytes;
    private final LongAdder zeroedBytes;
    private final ArrayDeque<Chunk> window = new ArrayDeque<>();

    /**
     * @param buffers one chunk-sized buffer per chunk the window holds; a buffer a failed read may still land in is
     *        replaced in the array, so the caller's next copy never shares it
     */
    SlabCopy(Slab slab, Replica target, RebuildGate gate, RebuildPace pace, MemorySegment[] buffers,
            MemorySegment zeroChunk, long timeoutNanos, LongAdder copiedBytes, LongAdder zeroedBytes) {
        this.slab = slab;
        this.target = target;
        this.gate = gate;
        this.pace = pace;
        this.buffers = buffers;
        this.zeroChunk = zeroChunk;
        this.timeoutNanos = timeoutNanos;
        this.copiedBytes = copiedBytes;
        this.zeroedBytes = zeroedBytes;
    }

    /** Copies every chunk; the gate is open again when it returns or throws. */
    void run() throws RebuildAborted, InterruptedException, TimeoutException {
        try {
            int next = 0;
            while (next < gate.chunks() || !window.isEmpty()) {
                while (window.size() < buffers.length && next < gate.chunks()) {
                    window.addLast(open(next++));
                }
                for (Chunk c : window) {
                    if (c.writing == null && c.reading.isDone()) {
                        readDone(c);
                    }
                }
                Chunk oldest = window.getFirst();
                if (oldest.writing == null) {
                    readDone(oldest);
                } else {
                    landed(oldest);
                }
            }
        } finally {
            gate.open();
        }
    }

    private Chunk open(int index) throws RebuildAborted, InterruptedException, TimeoutException {
        long offset = (long) index * gate.chunkSize;
        int len = (int) Math.min(gate.chunkSize, slab.length - offset);
        pace.acquire(len);
        gate.close(index, timeoutNanos);
        Chunk c = new Chunk(index, offset, len);
        read(c);
        return c;
    }

    private void read(Chunk c) throws RebuildAborted {
        ReplicaSet set = slab.set;
        if (!target.equals(set.building)) {
            throw new RebuildAborted("the rebuild target left the slab");
        }
        if (set.lost()) {
            throw new RebuildAborted("no live replica left to copy from");
        }
        c.source = slab.resyncWanted.get() ? set.live.getFirst() : set.forRead();
        c.reading = c.source.connection().read(c.source.region(), c.offset, buffer(c));
    }

    /**
     * Waits for the read of {@code c}, then sends the chunk to the target; a read that fails or does not answer in
     * time fails its source like any other failure, and the chunk is read again from another replica.
     */
    private void readDone(Chunk c) throws RebuildAborted, InterruptedException {
        try {
            c.reading.get(timeoutNanos, TimeUnit.NANOSECONDS);
        } catch (ExecutionException | TimeoutException e) {
            slab.fail(c.source, Failures.reason(e));
            replaceBuffer(c);
            read(c);
            return;
        }
        MemorySegment data = buffer(c);
        if (data.mismatch(zeroChunk.asSlice(0, c.len)) == -1) {
            c.zero = true;
            c.writing = target.connection().zero(target.region(), c.offset, c.len);
        } else {
            c.writing = target.connection().write(target.region(), c.offset, data);
        }
    }

    /** Waits for the oldest chunk's write, then opens the gate behind it. */
    private void landed(Chunk c) throws RebuildAborted, InterruptedException, TimeoutException {
        try {
            c.writing.get(timeoutNanos, TimeUnit.NANOSECONDS);
        } catch (ExecutionException | TimeoutException e) {
            throw new RebuildAborted("writing to " + target.describe() + " failed: " + Failures.reason(e));
        }
        window.removeFirst();
        gate.openThrough(c.index);
        slab.rebuildCopied.set(c.offset + c.len);
        copiedBytes.add(c.len);
        if (c.zero) {
            zeroedBytes.add(c.len);
        }
    }

    private MemorySegment buffer(Chunk c) {
        return buffers[c.index % buffers.length].asSlice(0, c.len);
    }

    /** A failed read may still land in its buffer later: the chunk (and the caller's next copies) take a new one. */
    private void replaceBuffer(Chunk c) {
        buffers[c.index % buffers.length] = MemorySegment.ofBuffer(ByteBuffer.allocateDirect(gate.chunkSize));
    }

    /** Copy buffers for a window of {@code chunks} chunks of {@code chunkSize} bytes. */
    static MemorySegment[] buffers(int chunks, int chunkSize) {
        MemorySegment[] b = new MemorySegment[chunks];
        for (int i = 0; i < chunks; i++) {
            b[i] = MemorySegment.ofBuffer(ByteBuffer.allocateDirect(chunkSize));
        }
        return b;
    }

    /** One chunk in the window. */
    private static final class Chunk {
        final int index;
        final long offset;
        final int len;
        Replica source;
        CompletableFuture<Void> reading;
        CompletableFuture<Void> writing;
        boolean zero;

        Chunk(int index, long offset, int len) {
            this.index = index;
            this.offset = offset;
            this.len = len;
        }
    }

    /** The copy cannot go on: the target failed or left, or no replica is left to copy from. */
    static final class RebuildAborted extends Exception {
        RebuildAborted(String message) {
            super(message);
        }
    }
}
