package dev.rbridge.memserver;

import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;

import java.util.List;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Supplier;

/**
 * Lists of every region, a bounded number in memory at a time: one of the most regions allowed is a few megabytes of
 * heap while it is built and sent. Keys are withheld (0): a client gets a key by allocating or opening, where the
 * volume's lease is checked, so a fenced-off owner cannot learn the rotated keys by listing.
 */
final class RegionListings {
    private final int places;
    private final long waitMillis;
    private final Semaphore listings;
    /** Builds a list; called holding a place. */
    private final Supplier<List<RegionInfo>> regions;

    /**
     * @param places     listings in memory at once
     * @param waitMillis how long a listing for a client waits for a place
     */
    RegionListings(int places, long waitMillis, Supplier<List<RegionInfo>> regions) {
        this.places = places;
        this.waitMillis = waitMillis;
        this.listings = new Semaphore(places);
        this.regions = regions;
    }

    /** For use in this process: the place is given back once the list is built. */
    List<RegionInfo> list() {
        listings.acquireUninterruptibly();
        try {
            return regions.get();
        } finally {
            listings.release();
        }
    }

    /**
     * For a reply to a client: the place is held until the transport has written the entries out (it cuts off a
     * client that does not read them within the hello timeout), so the listings in memory at once stay bounded, not
     * one per client that asked and never read.
     */
    RegionService.Listing listing() throws RemoteMemoryException {
        boolean placed;
        try {
            placed = listings.tryAcquire(waitMillis, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            placed = false;
        }
        if (!placed) {
            throw new RemoteMemoryException(Status.NO_CAPACITY, places + " region listings are being "
                    + "sent to clients already (the limit); try again");
        }
        List<RegionInfo> list;
        try {
            list = regions.get();
        } catch (RuntimeException | Error e) {
            listings.release();
            throw e;
        }
        AtomicBoolean open = new AtomicBoolean(true);
        return new RegionService.Listing() {
            @Override
            public List<RegionInfo> regions() {
                return list;
            }

            @Override
            public void close() {
                if (open.compareAndSet(true, false)) {
                    listings.release();
                }
            }
        };
    }

    /** Listings held now, being built or sent. */
    int held() {
        return places - listings.availablePermits();
    }
}
