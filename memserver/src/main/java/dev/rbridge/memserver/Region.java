package dev.rbridge.memserver;

import dev.rbridge.memory.AnonymousMemory;
import dev.rbridge.rdma.RegionDescriptor;

import java.util.concurrent.atomic.AtomicInteger;

/**
 * One granted region: lazily backed memory plus its descriptor. Data operations pin it; the memory is unmapped only
 * when it has been released (or revoked) and the last pin is gone, so a release racing a transfer never frees memory
 * under the transfer.
 *
 * <p>The descriptor changes when the region is retagged or its key is rotated (a lease taken over): it is replaced
 * whole, so the key and tag a data operation sees always belong together, and reading it is one volatile load on the
 * data path. Writers hold the memserver's control lock.
 */
final class Region {
    volatile RegionDescriptor descriptor;
    final AnonymousMemory memory;
    final String owner;
    final long ownerId;
    /**
     * Allocated by a client that did not hold its volume's lease (ping's and bench's scratch memory): released when
     * that client's connection ends. Otherwise it is a leased volume's data and stays for the next holder.
     */
    final boolean scratch;
    /** One reference for being alive plus one per pin; zero means unmapped. */
    private final AtomicInteger references = new AtomicInteger(1);
    private boolean released;

    Region(RegionDescriptor descriptor, AnonymousMemory memory, String owner, long ownerId, boolean scratch) {
        this.descriptor = descriptor;
        this.memory = memory;
        this.owner = owner;
        this.ownerId = ownerId;
        this.scratch = scratch;
    }

    boolean pin() {
        while (true) {
            int n = references.get();
            if (n == 0) {
                return false;
            }
            if (references.compareAndSet(n, n + 1)) {
                return true;
            }
        }
    }

    void unpin() {
        if (references.decrementAndGet() == 0) {
            memory.close();
        }
    }

    /** RAM backing this region now; 0 once unmapped. */
    long residentBytes() {
        return memory.residentBytes();
    }

    /** Drops the alive reference; true the first time. */
    synchronized boolean release() {
        if (released) {
            return false;
        }
        released = true;
        unpin();
        return true;
    }
}
