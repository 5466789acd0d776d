package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.wire.Message;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * A {@link UcxConnection}'s remote keys, one {@link UcxMapping} per region: asked for with MAP (the memserver checks
 * the access key), unpacked on the progress thread, cached until an INVALIDATE names the region ({@link #withdraw})
 * or the endpoint goes ({@link #closeAll}).
 */
final class UcxRemoteKeys {
    private static final Logger log = LoggerFactory.getLogger(UcxConnection.class);

    private final UcxLoop loop;
    private final UcxCompletions completions;
    /** The connection's endpoint, which unpacks the keys; read on the progress thread. */
    private final Supplier<UcpEndpoint> endpoint;
    /** Sends MAP for a region; the reply's continuation may run on any thread. */
    private final Function<RegionDescriptor, CompletableFuture<Message.MapReply>> map;
    private final Map<MapKey, MapEntry> mappings = new ConcurrentHashMap<>();

    private record MapKey(long region, long key, long length) {
    }

    /**
     * A region's mapping while it is being made and once it is. {@code revoked} is set, before anything else is done
     * about it, when an INVALIDATE names the region: whichever comes last of that INVALIDATE's handling and the
     * unpacking of the MAP reply sees it, so a reply and an INVALIDATE that follow each other at once never leave a
     * valid-looking mapping with a withdrawn key, whatever thread ran the reply's continuation and when.
     */
    private static final class MapEntry {
        final CompletableFuture<UcxMapping> mapping = new CompletableFuture<>();
        volatile boolean revoked;
        /**
         * The mapping once its key is unpacked, before {@link #mapping} is completed with it (on the completion
         * thread, later): the progress thread's only, so an INVALIDATE handled in between still finds the key.
         */
        UcxMapping unpacked;
    }

    UcxRemoteKeys(UcxLoop loop, UcxCompletions completions, Supplier<UcpEndpoint> endpoint,
            Function<RegionDescriptor, CompletableFuture<Message.MapReply>> map) {
        this.loop = loop;
        this.completions = completions;
        this.endpoint = endpoint;
        this.map = map;
    }

    /** The region's mapping: the cached one, or one a new MAP makes. */
    CompletableFuture<UcxMapping> mapping(RegionDescriptor d) {
        MapKey k = new MapKey(d.id(), d.key(), d.length());
        MapEntry m = mappings.get(k);
        if (m != null) {
            return m.mapping;
        }
        MapEntry mine = new MapEntry();
        m = mappings.putIfAbsent(k, mine);
        if (m != null) {
            return m.mapping;
        }
        CompletableFuture<Message.MapReply> reply = map.apply(d);
        // The continuation may run on the reader thread or, when the reply was quicker, on this one and later than
        // an INVALIDATE that followed the reply: the entry's revoked flag, not the order of threads, settles it.
        reply.whenComplete((r, e) -> {
            if (e != null) {
                mappings.remove(k, mine); // not cached: the next operation asks again
                mine.mapping.completeExceptionally(e);
                return;
            }
            loop.execute(() -> unpack(k, mine, d, r));
        });
        return mine.mapping;
    }

    /** On the progress thread: unpacks the MAP reply's key, unless the region was withdrawn meanwhile. */
    private void unpack(MapKey k, MapEntry mine, RegionDescriptor d, Message.MapReply r) {
        if (mine.revoked) { // withdrawn already: never unpacked; whoever waits asks again
            completions.execute(() -> mine.mapping.complete(UcxMapping.REVOKED));
            return;
        }
        try {
            UcxMapping made = new UcxMapping(r.address(), r.length(),
                    endpoint.get().unpackRemoteKey(direct(r.remoteKey().buffer())));
            mine.unpacked = made;
            completions.execute(() -> mine.mapping.complete(made));
        } catch (RuntimeException x) {
            mappings.remove(k, mine);
            completions.execute(() -> mine.mapping.completeExceptionally(new RemoteMemoryException(
                    Status.INTERNAL, "UCX could not unpack the remote key of region " + d.id() + ": "
                            + x.getMessage())));
        }
    }

    /** The mapping if it is there with a key, null while it is being made, when it failed or was revoked unmade. */
    static UcxMapping doneOrNull(CompletableFuture<UcxMapping> f) {
        UcxMapping m = f.isDone() && !f.isCompletedExceptionally() ? f.join() : null;
        return m == null || m.rkey == null ? null : m;
    }

    /**
     * The memserver withdraws {@code regionIds}: their mappings are forgotten at once; then, on the progress thread,
     * the unpacked ones are marked invalid (no operation is queued with their keys from then on) and handed to
     * {@code gone}, whose job it is to destroy their keys once what used them is flushed.
     */
    void withdraw(Collection<Long> regionIds, Consumer<List<UcxMapping>> gone) {
        Set<Long> regions = new HashSet<>(regionIds);
        List<MapEntry> dropped = new ArrayList<>();
        mappings.entrySet().removeIf(e -> {
            if (regions.contains(e.getKey().region())) {
                e.getValue().revoked = true; // before the task below is queued: see MapEntry
                dropped.add(e.getValue());
                return true;
            }
            return false;
        });
        loop.execute(() -> {
            List<UcxMapping> invalid = new ArrayList<>();
            for (MapEntry f : dropped) {
                UcxMapping m = f.unpacked;
                if (m != null) {
                    synchronized (m) {
                        m.valid = false;
                    }
                    invalid.add(m);
                }
            }
            gone.accept(invalid);
        });
    }

    /** On the progress thread, once the endpoint is gone: destroys every unpacked key and forgets them all. */
    void closeAll() {
        for (MapEntry f : mappings.values()) {
            UcxMapping m = f.unpacked;
            if (m != null) {
                try {
                    m.rkey.close();
                } catch (RuntimeException e) {
                    log.debug("rkey destroy failed", e);
                }
            }
        }
        mappings.clear();
    }

    /** A copy in native memory: what JUCX wants for addresses and keys. */
    static ByteBuffer direct(ByteBuffer b) {
        return ByteBuffer.allocateDirect(b.remaining()).put(b).flip();
    }
}
