package dev.rbridge.memserver;

import dev.rbridge.memory.AnonymousMemory;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.Providers;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteListener;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.ServerInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The memory server: lends RAM as regions to authenticated clients over a remote-memory provider. Regions are
 * anonymous mappings, so memory is touched only when written, reads of the untouched part return zeroes, and a
 * grant counts against the capacity whether touched or not (capacity is a promise, not a guess).
 */
public final class MemServer implements RegionService, AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(MemServer.class);

    private final MemServerConfig config;
    private final String serverId = UUID.randomUUID().toString();
    private final Map<Long, Region> regions = new ConcurrentHashMap<>();
    private final Set<Client> clients = ConcurrentHashMap.newKeySet();
    private final AtomicLong granted = new AtomicLong();
    private final AtomicLong nextRegionId = new AtomicLong(1);
    private final AtomicLong nextClientId = new AtomicLong(1);
    private final AtomicLong refusedAuth = new AtomicLong();
    private final SecureRandom random = new SecureRandom();
    private volatile boolean draining;
    private final CompletableFuture<Void> drained = new CompletableFuture<>();
    private RemoteListener listener;

    private MemServer(MemServerConfig config) {
        this.config = config;
    }

    /** Starts listening; fails with a clear message when the transport is unknown or the address is taken. */
    public static MemServer start(MemServerConfig config) throws IOException {
        RemoteMemoryProvider provider = Providers.byName(config.transport());
        MemServer server = new MemServer(config);
        server.listener = provider.listen(new ListenParams().address(config.listen()), server);
        if (config.token() == null) {
            log.warn("no token configured: any client that can reach {} may use this memory", server.address());
        }
        log.info("memserver {} lending up to {} bytes over {} at {}:{}", server.serverId, config.capacityBytes(),
                provider.name(), server.address().getHostString(), server.address().getPort());
        return server;
    }

    public InetSocketAddress address() {
        return listener.address();
    }

    public String serverId() {
        return serverId;
    }

    public long grantedBytes() {
        return granted.get();
    }

    public long refusedConnections() {
        return refusedAuth.get();
    }

    public int regionCount() {
        return regions.size();
    }

    // ------------------------------------------------------------------------------------------ RegionService

    @Override
    public Session open(String token, String clientName, SocketAddress peer) throws RemoteMemoryException {
        if (draining) {
            throw new RemoteMemoryException(Status.SHUTTING_DOWN, "memserver is draining; no new clients");
        }
        if (config.token() != null && !MessageDigest.isEqual(config.token().getBytes(StandardCharsets.UTF_8),
                token.getBytes(StandardCharsets.UTF_8))) {
            refusedAuth.incrementAndGet();
            log.warn("refused client '{}' from {}: wrong token", clientName, peer);
            throw new RemoteMemoryException(Status.AUTH_FAILED, "wrong token");
        }
        Client c = new Client(nextClientId.getAndIncrement(), clientName, String.valueOf(peer));
        clients.add(c);
        log.info("client {} '{}' connected from {}", c.id, clientName, peer);
        return c;
    }

    private ServerInfo info() {
        return new ServerInfo(serverId, 1, config.capacityBytes(), config.capacityBytes() - granted.get());
    }

    private RegionDescriptor allocate(Client c, RegionTag tag, long length) throws RemoteMemoryException {
        if (draining) {
            throw new RemoteMemoryException(Status.SHUTTING_DOWN, "memserver is draining; no new regions");
        }
        if (length <= 0) {
            throw new RemoteMemoryException(Status.BAD_REQUEST, "region length must be positive: " + length);
        }
        long rounded = rounded(length);
        long before;
        do {
            before = granted.get();
            if (rounded > config.capacityBytes() - before) {
                throw new RemoteMemoryException(Status.NO_CAPACITY, "cannot grant " + rounded + " bytes: "
                        + (config.capacityBytes() - before) + " of " + config.capacityBytes() + " free");
            }
        } while (!granted.compareAndSet(before, before + rounded));
        AnonymousMemory memory;
        try {
            memory = AnonymousMemory.map(length, config.hugePages(), config.mlock());
        } catch (RuntimeException e) {
            granted.addAndGet(-rounded);
            log.warn("could not grant {} bytes: {}", rounded, e.getMessage());
            throw new RemoteMemoryException(Status.NO_CAPACITY, "the memserver's system refused " + rounded
                    + " bytes: " + e.getMessage());
        }
        long key;
        do {
            key = random.nextLong();
        } while (key == 0);
        RegionDescriptor d = new RegionDescriptor(nextRegionId.getAndIncrement(), length, key, tag);
        regions.put(d.id(), new Region(d, memory, c.name, c.id));
        log.debug("client {}: granted {}", c.id, d);
        return d;
    }

    /** What a region of this length costs against the capacity: whole pages of the kind configured. */
    private long rounded(long length) {
        long page = config.hugePages() ? AnonymousMemory.HUGE_PAGE_SIZE : AnonymousMemory.PAGE_SIZE;
        return (length + page - 1) & -page;
    }

    private RegionDescriptor openRegion(long id) throws RemoteMemoryException {
        Region r = regions.get(id);
        if (r == null) {
            throw new RemoteMemoryException(Status.NO_SUCH_REGION, "no region " + id);
        }
        return r.descriptor;
    }

    private List<RegionInfo> listRegions() {
        List<RegionInfo> out = new ArrayList<>();
        for (Region r : regions.values()) {
            out.add(new RegionInfo(r.descriptor, r.owner));
        }
        out.sort(Comparator.comparingLong(i -> i.descriptor().id()));
        return out;
    }

    private void release(long id, long key) throws RemoteMemoryException {
        Region r = checked(id, key);
        if (regions.remove(id, r) && r.release()) {
            granted.addAndGet(-rounded(r.descriptor.length()));
            log.debug("released {}", r.descriptor);
        }
    }

    /** Operator action: takes a region away from whoever holds it. */
    public boolean revoke(long id) {
        Region r = regions.remove(id);
        if (r != null && r.release()) {
            granted.addAndGet(-rounded(r.descriptor.length()));
            log.info("revoked {}", r.descriptor);
            return true;
        }
        return false;
    }

    private Region checked(long id, long key) throws RemoteMemoryException {
        Region r = regions.get(id);
        if (r == null) {
            throw new RemoteMemoryException(Status.NO_SUCH_REGION, "no region " + id);
        }
        if (r.descriptor.key() != key) {
            throw new RemoteMemoryException(Status.ACCESS_DENIED, "wrong access key for region " + id);
        }
        return r;
    }

    /** A pinned range of one region; closing it (once) drops the pin. */
    private static final class RegionPin implements Pin {
        final Region region;
        private final MemorySegment slice;
        private boolean closed;

        RegionPin(Region region, MemorySegment slice) {
            this.region = region;
            this.slice = slice;
        }

        public MemorySegment memory() {
            return slice;
        }

        public void close() {
            if (!closed) {
                closed = true;
                region.unpin();
            }
        }
    }

    private RegionPin pin(long id, long key, long offset, long length) throws RemoteMemoryException {
        Region r = checked(id, key);
        if (offset < 0 || length < 0 || offset > r.descriptor.length() - length) {
            throw new RemoteMemoryException(Status.OUT_OF_RANGE, "range " + offset + "+" + length
                    + " is outside region " + id + " (" + r.descriptor.length() + " bytes)");
        }
        if (!r.pin()) {
            throw new RemoteMemoryException(Status.NO_SUCH_REGION, "region " + id + " was released");
        }
        return new RegionPin(r, r.memory.segment().asSlice(offset, length));
    }

    private void zero(long id, long key, long offset, long length) throws RemoteMemoryException {
        try (RegionPin p = pin(id, key, offset, length)) {
            long page = p.region.memory.pageSize();
            long pageStart = (offset + page - 1) & -page;
            long pageEnd = (offset + length) & -page;
            if (pageStart < pageEnd) {
                p.memory().asSlice(0, pageStart - offset).fill((byte) 0);
                p.region.memory.release(pageStart, pageEnd - pageStart); // whole pages go back to the system
                p.memory().asSlice(pageEnd - offset).fill((byte) 0);
            } else {
                p.memory().fill((byte) 0);
            }
        }
    }

    // ------------------------------------------------------------------------------------------------- admin

    /** A connected client as an operator sees it. */
    public record ClientView(long id, String name, String address, String state, int regions, long bytes,
                             ConnectionStats.Snapshot stats) {
    }

    public List<ClientView> clients() {
        List<ClientView> out = new ArrayList<>();
        for (Client c : clients) {
            int n = 0;
            long bytes = 0;
            for (Region r : regions.values()) {
                if (r.ownerId == c.id) {
                    n++;
                    bytes += r.descriptor.length();
                }
            }
            ConnectionStats st = c.stats;
            out.add(new ClientView(c.id, c.name, c.peer, draining ? "draining" : "connected", n, bytes,
                    st == null ? new ConnectionStats().snapshot() : st.snapshot()));
        }
        out.sort(Comparator.comparingLong(ClientView::id));
        return out;
    }

    public List<RegionInfo> regions() {
        return listRegions();
    }

    /** Operator action: cuts a client's connection. Its regions stay (it may reconnect and reattach). */
    public boolean disconnect(long clientId) {
        for (Client c : clients) {
            if (c.id == clientId && c.disconnect != null) {
                log.info("disconnecting client {} '{}' at an operator's request", c.id, c.name);
                c.disconnect.run();
                return true;
            }
        }
        return false;
    }

    /**
     * Refuses new clients and new grants from now on; the returned future completes when the last client has left.
     */
    public CompletableFuture<Void> drain() {
        if (!draining) {
            draining = true;
            log.info("draining: no new clients or regions; waiting for {} client(s) to leave", clients.size());
        }
        if (clients.isEmpty()) {
            drained.complete(null);
        }
        return drained;
    }

    public boolean draining() {
        return draining;
    }

    public long capacityBytes() {
        return config.capacityBytes();
    }

    // ---------------------------------------------------------------------------------------------- lifecycle

    @Override
    public void close() {
        draining = true;
        listener.close();
        for (Long id : List.copyOf(regions.keySet())) {
            revoke(id);
        }
        log.info("memserver {} stopped", serverId);
    }

    /** A connected client. Its regions outlive it: a restarted bridge reattaches to them. */
    private final class Client implements Session {
        final long id;
        final String name;
        final String peer;
        volatile ConnectionStats stats;
        volatile Runnable disconnect;

        Client(long id, String name, String peer) {
            this.id = id;
            this.name = name;
            this.peer = peer;
        }

        public ServerInfo serverInfo() {
            return info();
        }

        public RegionDescriptor allocate(RegionTag tag, long length) throws RemoteMemoryException {
            return MemServer.this.allocate(this, tag, length);
        }

        public RegionDescriptor open(long regionId) throws RemoteMemoryException {
            return openRegion(regionId);
        }

        public List<RegionInfo> list() {
            return listRegions();
        }

        public void release(long regionId, long key) throws RemoteMemoryException {
            MemServer.this.release(regionId, key);
        }

        public Pin pin(long regionId, long key, long offset, long length) throws RemoteMemoryException {
            return MemServer.this.pin(regionId, key, offset, length);
        }

        public void zero(long regionId, long key, long offset, long length) throws RemoteMemoryException {
            MemServer.this.zero(regionId, key, offset, length);
        }

        public void attach(ConnectionStats stats, Runnable disconnect) {
            this.stats = stats;
            this.disconnect = disconnect;
        }

        public void closed() {
            clients.remove(this);
            log.info("client {} '{}' from {} disconnected", id, name, peer);
            if (draining && clients.isEmpty()) {
                drained.complete(null);
            }
        }
    }
}
