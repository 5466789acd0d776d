package dev.rbridge.nbd.server;

import java.nio.ByteBuffer;

/**
 * Where the payload buffers' memory comes from: blocks of direct memory that the {@link BufferPool} carves into
 * buffers and frees only when every buffer carved from a block is idle. The default is plain direct memory; a
 * transport that must register the memory it moves data from and into (an RDMA NIC) registers each block once, when
 * it is made, so moving a payload never registers anything.
 */
public interface PayloadMemory {
    /** A new page-aligned direct block of exactly {@code bytes} bytes, held until {@link #free}. */
    ByteBuffer allocate(int bytes);

    /** Gives a block back; no buffer carved from it is in use. */
    void free(ByteBuffer block);

    /** Plain direct memory: page-aligned slices of {@link ByteBuffer#allocateDirect} buffers, freed by the GC. */
    PayloadMemory DIRECT = new PayloadMemory() {
        private static final int PAGE = 4096;

        @Override
        public ByteBuffer allocate(int bytes) {
            return ByteBuffer.allocateDirect(bytes + PAGE).alignedSlice(PAGE).limit(bytes).slice();
        }

        @Override
        public void free(ByteBuffer block) {}
    };
}
