package dev.rbridge.memserver;

import dev.rbridge.memory.AnonymousMemory;
import dev.rbridge.memory.WrittenPages;
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
    /** Guarded by this. */
    private boolean released;
    /** Open pins that hand the memory to a device holding its pages (see {@link #zero}); guarded by this. */
    private int deviceHolds;
    /** Told once the memory is unmapped: what the region granted is free from then on. */
    private final java.util.function.Consumer<Region> onUnmapped;

    Region(RegionDescriptor descriptor, AnonymousMemory memory, String owner, long ownerId, boolean scratch,
            java.util.function.Consumer<Region> onUnmapped) {
        this.descriptor = descriptor;
        this.memory = memory;
        this.owner = owner;
        this.ownerId = ownerId;
        this.scratch = scratch;
        this.onUnmapped = onUnmapped;
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
            onUnmapped.accept(this);
        }
    }

    /** From now on something writes this memory without reporting which pages: it all counts as written. */
    void exposed() {
        memory.writtenPages().markEverything(); // for good: giving pages back does not undo it
    }

    /** A device holds this region's pages until {@link #releasedByDevice}. */
    synchronized void heldByDevice() {
        exposed();
        deviceHolds++;
    }

    synchronized void releasedByDevice() {
        deviceHolds--;
    }

    /**
     * Zeroes {@code [offset, offset + length)} (within the region), for every transport alike. The whole pages of the
     * range go back to the system (madvise), so a zeroed range costs no RAM, and what is left at its edges is
     * zeroed in place where it was written. Not while a device holds the region's pages, though: an RDMA NIC that
     * registered the memory pinned the physical pages and keeps reading and writing them, so giving them back would
     * hand the process fresh zero pages behind the NIC's back, and the NIC would go on serving the old data. The
     * range is then filled with zeroes instead. Which registrations hold pages is the transport's to say (a UCX
     * registration over RDMA does; over UCX's tcp or shared-memory transports nothing is pinned: the memserver's own
     * thread makes those copies through the page tables), see {@code RegionService.Pin#heldByDevice}. The check and
     * the madvise hold this region's lock, which a registration takes before it starts, so none can start in between.
     */
    void zero(long offset, long length) {
        long page = memory.pageSize();
        long pageStart = (offset + page - 1) & -page;
        long pageEnd = (offset + length) & -page;
        synchronized (this) {
            if (deviceHolds == 0 && pageStart < pageEnd) {
                memory.release(pageStart, pageEnd - pageStart); // whole pages go back to the system
                zeroWritten(offset, pageStart - offset);
                zeroWritten(pageEnd, offset + length - pageEnd);
                return;
            }
        }
        zeroWritten(offset, length);
    }

    /** Zeroes the written parts of a range; the rest reads as zeroes already and is left untouched. */
    private void zeroWritten(long from, long length) {
        WrittenPages written = memory.writtenPages();
        long end = from + length;
        for (long at = from; at < end;) {
            long runEnd = written.runEnd(at, end);
            if (written.isWritten(at)) {
                memory.segment().asSlice(at, runEnd - at).fill((byte) 0);
            }
            at = runEnd;
        }
    }

    /** Whether the memory is unmapped: released and no pin left. */
    boolean unmapped() {
        return references.get() == 0;
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
