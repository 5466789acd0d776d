package dev.rbridge.bridge;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.placement.PlacementPolicy;
import dev.rbridge.bridge.volume.Replica;
import dev.rbridge.bridge.volume.Slab;
import dev.rbridge.common.Failures;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.Function;

/**
 * Where new slab replicas go: each on a memserver of its own that is up, not draining and has room, chosen by
 * {@link PlacementPolicy} (the power of two choices on free capacity); and giving regions back. A memserver that
 * refuses a region of a volume as another client's fences the volume.
 */
final class Placement {
    /** Logged as the bridge, as before these parts had classes of their own. */
    private static final Logger log = LoggerFactory.getLogger(Bridge.class);

    private final List<MemserverLink> links;
    private final LeaseKeeper leases;

    Placement(List<MemserverLink> links, LeaseKeeper leases) {
        this.links = links;
        this.leases = leases;
    }

    /** See {@link dev.rbridge.bridge.volume.SlabHost#place}. */
    CompletableFuture<List<Replica>> place(Slab slab, int count, long generation, Set<MemserverLink> exclude) {
        // Replica slot numbers are informational (shown by admin): new copies number on from the existing ones.
        return placeNext(slab, count, generation, new HashSet<>(exclude), new HashSet<>(exclude), new ArrayList<>(),
                null, exclude.size());
    }

    /**
     * Places the rest of {@code count} replicas one by one: {@code tried} are never chosen again (holders and
     * memservers that refused), {@code holders} the memservers that hold one of the slab's replicas now.
     */
    private CompletableFuture<List<Replica>> placeNext(Slab slab, int count, long generation, Set<MemserverLink> tried,
            Set<MemserverLink> holders, List<Replica> got, Throwable lastError, int firstSlot) {
        if (got.size() == count) {
            return CompletableFuture.completedFuture(got);
        }
        MemserverLink l = PlacementPolicy.choose(links, tried, holders, slab.length(), ThreadLocalRandom.current());
        if (l == null) {
            return got.isEmpty() ? CompletableFuture.failedFuture(noRoom(slab, lastError))
                    : CompletableFuture.completedFuture(got);
        }
        tried.add(l);
        RemoteConnection c = l.connection();
        if (c == null) {
            return placeNext(slab, count, generation, tried, holders, got, lastError, firstSlot);
        }
        long length = slab.length();
        l.reserved.addAndGet(length);
        int slot = firstSlot + got.size();
        return c.allocate(new RegionTag(slab.volume().name(), slab.index(), slot, generation), length)
                .handle((d, e) -> {
                    if (e == null) {
                        got.add(new Replica(l, c, l.serverId(), d));
                        holders.add(l);
                        return placeNext(slab, count, generation, tried, holders, got, lastError, firstSlot);
                    }
                    l.reserved.addAndGet(-length);
                    log.debug("memserver {} refused a region for volume {} slab {}: {}", l.label(),
                            slab.volume().name(), slab.index(), Failures.reason(e));
                    if (Failures.cause(e) instanceof RemoteMemoryException r && r.status() == Status.ACCESS_DENIED) {
                        leases.fence(slab.volume(), "memserver " + l.label() + " refused this bridge a region of "
                                + "the volume (" + r.getMessage() + "): another client took the volume's lease over "
                                + "there");
                        got.forEach(this::release);
                        return CompletableFuture.<List<Replica>>failedFuture(r);
                    }
                    return placeNext(slab, count, generation, tried, holders, got, Failures.cause(e), firstSlot);
                }).thenCompose(Function.identity());
    }

    /** Why no replica of {@code slab} could be placed: no memserver is up, or none had room (or took it). */
    private RemoteMemoryException noRoom(Slab slab, Throwable lastError) {
        boolean anyUp = links.stream().anyMatch(x -> x.connection() != null);
        if (!anyUp) {
            return new RemoteMemoryException(Status.CONNECTION_LOST,
                    "no memserver is reachable for volume " + slab.volume().name() + " slab " + slab.index());
        }
        String why = "no reachable memserver has " + slab.length() + " bytes free for volume "
                + slab.volume().name() + " slab " + slab.index()
                + (lastError == null ? "" : " (last refusal: " + Failures.reason(lastError) + ")");
        return new RemoteMemoryException(Status.NO_CAPACITY, why);
    }

    /** Gives a region back, best effort (see {@link dev.rbridge.bridge.volume.SlabHost#release}). */
    void release(Replica r) {
        if (r.connection().isOpen()) {
            r.connection().release(r.region()).whenComplete((v, e) -> {
                if (e != null) {
                    log.debug("could not release {}: {}", r.describe(), Failures.reason(e));
                }
            });
        }
    }
}
