package dev.rbridge.memserver;

import dev.rbridge.common.Printable;
import dev.rbridge.memory.AnonymousMemory;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.common.tls.X509Credentials;
import dev.rbridge.common.RateLimitedLog;
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
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The memory server: lends RAM as regions to authenticated clients over a remote-memory provider. Regions are
 * anonymous mappings, so memory is touched only when written, reads of the untouched part return zeroes, and a
 * grant counts against the capacity whether touched or not (capacity is a promise, not a guess).
 *
 * <p>Volume leases ({@link Leases}): while a connection holds a volume's lease, only it may allocate, open, retag or
 * release the regions tagged with that volume, and every grant but its own renewal rotates the access key of every
 * region of the volume (fencing). The lease table and every control operation that reads or changes a region's key or
 * tag run under one lock ({@link #control}); the data path only reads the region's volatile descriptor.
 *
 * <p>Regions a client allocates without holding their volume's lease (ping's and bench's scratch memory) are its own
 * and are released when its connection ends; regions of a volume it leases are the volume's data and stay for the
 * next holder.
 *
 * <p>What a peer can make this memserver hold is bounded: regions ({@code maxRegions}), leases (see {@link Leases}),
 * client names ({@value #MAX_CLIENT_NAME} bytes), and the regions listed at once ({@value #CONCURRENT_LISTINGS}
 * listings in memory at a time, each held until it is sent).
 */
public final class MemServer implements RegionService, AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(MemServer.class);

    private final MemServerConfig config;
    private final String serverId = UUID.randomUUID().toString();
    private final Map<Long, Region> regions = new ConcurrentHashMap<>();
    /** Regions released or revoked whose memory a pin still holds: counted against the capacity until unmapped. */
    private final Set<Region> lingering = ConcurrentHashMap.newKeySet();
    private final Set<ClientSession> clients = ConcurrentHashMap.newKeySet();
    private final AtomicLong granted = new AtomicLong();
    private final AtomicLong nextRegionId = new AtomicLong(1);
    private final AtomicLong nextClientId = new AtomicLong(1);
    private final AtomicLong refusedAuth = new AtomicLong();
    /** Regions granted or being granted: reserved before the memory is mapped, so the limit holds under races. */
    private final AtomicInteger regionSlots = new AtomicInteger();
    private final Semaphore listings = new Semaphore(CONCURRENT_LISTINGS);
    /** Peers can cause these lines (wrong tokens): at most one per reason every few seconds. */
    private static final RateLimitedLog limited = new RateLimitedLog(log);
    /** Refused peers by reason ({@code token}, {@code draining}, and the transport's reasons). */
    private final Map<String, AtomicLong> refused = new ConcurrentHashMap<>();
    /** Transport counters of clients that have left, so totals over all clients never go backwards. */
    private final ConnectionStats departed = new ConnectionStats();
    /**
     * Makes "a departing client's counters move into {@link #departed} and the client leave {@link #clients}" one step
     * for {@link #stats()}, which reads both: otherwise a scrape in between counts it twice or not at all, and a
     * Prometheus counter that dips reads as a reset.
     */
    private final Object transportTotals = new Object();
    /**
     * Guards {@link #leases} and makes each control operation's lease check and its effect on the region table one
     * step, so a key rotation never interleaves with an open that hands out a key or an allocate that adds a region.
     */
    private final Object control = new Object();
    /** The volume leases; guarded by {@link #control}. */
    private final Leases leases = new Leases();
    private final SecureRandom random = new SecureRandom();
    private volatile boolean draining;
    private final CompletableFuture<Void> drained = new CompletableFuture<>();
    private RemoteListener listener;

    private MemServer(MemServerConfig config) {
        this.config = config;
    }

    /** Starts listening; fails with a clear message when the transport is unknown or the address is taken. */
    public static MemServer start(MemServerConfig config) throws IOException {
        return start(config, new ListenParams().helloTimeout());
    }

    /** As {@link #start(MemServerConfig)}, with another hello timeout (tests that wait it out). */
    static MemServer start(MemServerConfig config, Duration helloTimeout) throws IOException {
        RemoteMemoryProvider provider = Providers.byName(config.transport());
        MemServer server = new MemServer(config);
        ListenParams params = new ListenParams().address(config.listen())
                .tcpCongestion(config.tcpCongestion()).limits(config.connections()).helloTimeout(helloTimeout);
        if (config.tlsCertificates() != null) {
            if (provider.name().equals("local")) {
                throw new IllegalArgumentException("TLS applies to the tcp and ucx transports; local never leaves "
                        + "the process");
            }
            params.tls(X509Credentials.serverContext(config.tlsCertificates(), config.tlsVerifyPeer()),
                    config.tlsVerifyPeer());
        }
        server.listener = provider.listen(params, server);
        if (config.token() == null && !config.tlsVerifyPeer() && !provider.name().equals("local")) {
            // local: only this process reaches it
            log.warn("no token configured: any client that can reach {} may use this memory", server.address());
        }
        log.info("memserver {} lending up to {} bytes over {} at {}:{}{}{}", server.serverId, config.capacityBytes(),
                provider.name(), server.address().getHostString(), server.address().getPort(),
                provider.name().equals("tcp") ? " (TCP congestion control: " + config.tcpCongestion() + ")" : "",
                config.tlsCertificates() == null ? ", in clear" : ", TLS" + (config.tlsVerifyPeer()
                        ? " with client certificates" : "") + (provider.name().equals("ucx")
                        ? " on the control connection (RDMA data is not encrypted)" : ""));
        return server;
    }

    public InetSocketAddress address() {
        return listener.address();
    }

    /** Transport connections open now, those still in their handshake included. */
    public int connectionCount() {
        return listener.connectionCount();
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

    /** The transport refused a peer (another protocol version, garbage, a connection limit) and logged why. */
    @Override
    public void refused(String reason, SocketAddress peer) {
        refused.computeIfAbsent(reason, k -> new AtomicLong()).incrementAndGet();
    }

    /**
     * Everything a metrics binding polls, in one consistent-enough pass (each figure is read once; none is on the data
     * path). Transport counters are totals over every client since start, departed ones included.
     */
    public Stats stats() {
        long resident = 0;
        for (Region r : regions.values()) {
            resident += r.residentBytes();
        }
        long lingeringBytes = 0;
        for (Region r : lingering) {
            long n = r.residentBytes();
            resident += n;
            lingeringBytes += r.descriptor.length();
        }
        ConnectionStats.Snapshot total;
        synchronized (transportTotals) {
            total = departed.snapshot();
            for (ClientSession c : clients) {
                ConnectionStats st = c.stats;
                if (st != null) {
                    total = total.plus(st.snapshot());
                }
            }
        }
        Map<String, Long> refusedNow = new java.util.TreeMap<>();
        refused.forEach((k, v) -> refusedNow.put(k, v.get()));
        return new Stats(config.transport(), config.capacityBytes(), granted.get(), resident, regions.size(),
                clients.size(), Map.copyOf(refusedNow), draining, total, lingeringBytes);
    }

    /**
     * @param refused peers turned away since start, by reason: {@code token} (wrong token), {@code draining}, and the
     *                transport's ({@code version}, {@code malformed}, {@code hello_timeout}, {@code no_memory},
     *                {@code accept_failed} and the connection limits' reasons of {@link
     *                dev.rbridge.rdma.ConnectionGate})
     * @param lingeringBytes regions released or revoked whose memory an operation still pins: still counted in
     *                       {@code grantedBytes} (and their pages in {@code residentBytes}) until it is unmapped
     */
    public record Stats(String transport, long capacityBytes, long grantedBytes, long residentBytes, int regions,
                        int clients, Map<String, Long> refused, boolean draining,
                        ConnectionStats.Snapshot transportTotals, long lingeringBytes) {
    }

    public int regionCount() {
        return regions.size();
    }

    // ------------------------------------------------------------------------------------------ RegionService

    @Override
    public byte[] proveToken(byte[] transcript) {
        return config.token() == null ? null : dev.rbridge.rdma.wire.TokenProof.server(config.token(), transcript);
    }

    @Override
    public Session open(Credential credential, String clientName, SocketAddress peer) throws RemoteMemoryException {
        if (draining) {
            refused.computeIfAbsent("draining", k -> new AtomicLong()).incrementAndGet();
            limited.info("draining", "refused client '{}' from {}: draining", Printable.cut(clientName,
                    MAX_CLIENT_NAME), peer);
            throw new RemoteMemoryException(Status.SHUTTING_DOWN, "memserver is draining; no new clients");
        }
        if (config.token() != null && !credential.matches(config.token())) {
            refusedAuth.incrementAndGet();
            refused.computeIfAbsent("token", k -> new AtomicLong()).incrementAndGet();
            limited.warn("token", "refused client '{}' from {}: wrong token", Printable.cut(clientName, MAX_CLIENT_NAME),
                    peer);
            throw new RemoteMemoryException(Status.AUTH_FAILED, "wrong token");
        }
        String address = peer instanceof InetSocketAddress i ? i.getHostString() + ":" + i.getPort()
                : String.valueOf(peer);
        ClientSession c = new ClientSession(this, nextClientId.getAndIncrement(), Printable.cut(clientName,
                MAX_CLIENT_NAME), address);
        clients.add(c);
        log.info("client {} '{}' connected from {}", c.id, c.name, peer);
        return c;
    }

    /** Client names are cut to this many bytes (UTF-8): they are listed with every region the client allocated. */
    public static final int MAX_CLIENT_NAME = 128;

    ServerInfo info() {
        return new ServerInfo(serverId, 1, config.capacityBytes(), config.capacityBytes() - granted.get());
    }

    RegionDescriptor allocate(ClientSession c, RegionTag tag, long length) throws RemoteMemoryException {
        if (draining) {
            throw new RemoteMemoryException(Status.SHUTTING_DOWN, "memserver is draining; no new regions");
        }
        if (length <= 0) {
            throw new RemoteMemoryException(Status.BAD_REQUEST, "region length must be positive: " + length);
        }
        if (length > config.capacityBytes()) { // before any arithmetic on it: page rounding could overflow
            throw new RemoteMemoryException(Status.NO_CAPACITY, "cannot grant " + length + " bytes: more than this "
                    + "memserver's whole capacity of " + config.capacityBytes() + " bytes");
        }
        synchronized (control) {
            leases.check(c, tag.volume(), "allocate regions of it"); // early, so a refusal is not reported as NO_CAPACITY
        }
        long rounded = rounded(length);
        long before;
        do {
            before = granted.get();
            if (rounded > config.capacityBytes() - before) {
                throw new RemoteMemoryException(Status.NO_CAPACITY, "cannot grant " + length + " bytes ("
                        + rounded + " in whole pages): " + (config.capacityBytes() - before) + " of the capacity of "
                        + config.capacityBytes() + " bytes are free");
            }
        } while (!granted.compareAndSet(before, before + rounded));
        if (regionSlots.incrementAndGet() > config.maxRegions()) {
            regionSlots.decrementAndGet();
            granted.addAndGet(-rounded);
            throw new RemoteMemoryException(Status.NO_CAPACITY, "cannot grant another region: this memserver holds "
                    + "its limit of " + config.maxRegions() + " regions (--max-regions)");
        }
        AnonymousMemory memory;
        try {
            memory = AnonymousMemory.map(length, config.hugePages(), config.mlock(), config.numaNode());
        } catch (RuntimeException e) {
            regionSlots.decrementAndGet();
            granted.addAndGet(-rounded);
            log.warn("could not grant {} bytes ({} in whole pages): {}", length, rounded, e.getMessage());
            throw new RemoteMemoryException(Status.NO_CAPACITY, "the memserver's system refused " + length
                    + " bytes: " + e.getMessage());
        }
        long key;
        do {
            key = random.nextLong();
        } while (key == 0);
        RegionDescriptor d = new RegionDescriptor(nextRegionId.getAndIncrement(), length, key, tag);
        Region region;
        try {
            synchronized (control) {
                leases.check(c, tag.volume(), "allocate regions of it"); // again: a lease may have been taken meanwhile
                boolean volumeData = leases.holds(c, tag.volume());
                region = new Region(d, memory, c.name, c.id, !volumeData, this::unmapped);
                regions.put(d.id(), region);
            }
        } catch (RemoteMemoryException e) {
            memory.close();
            regionSlots.decrementAndGet();
            granted.addAndGet(-rounded);
            throw e;
        }
        log.debug("client {}: granted {}{}", c.id, d, region.scratch ? " (scratch: released when it disconnects)"
                : "");
        return d;
    }

    /** What a region of this length costs against the capacity: whole pages of the kind configured. */
    private long rounded(long length) {
        long page = config.hugePages() ? AnonymousMemory.HUGE_PAGE_SIZE : AnonymousMemory.PAGE_SIZE;
        return (length + page - 1) & -page; // no overflow: length is at most the capacity, at most 2^62
    }

    RegionDescriptor openRegion(ClientSession c, long id) throws RemoteMemoryException {
        synchronized (control) {
            Region r = regions.get(id);
            if (r == null) {
                throw new RemoteMemoryException(Status.NO_SUCH_REGION, "no region " + id);
            }
            RegionDescriptor d = r.descriptor;
            leases.check(c, d.tag().volume(), "open its regions");
            return d;
        }
    }

    /**
     * Every region, keys withheld (0): a client gets a key by allocating or opening, where the volume's lease is
     * checked, so a fenced-off owner cannot learn the rotated keys by listing. Call holding a place in {@link
     * #listings}.
     */
    private List<RegionInfo> listRegions() {
        List<RegionInfo> out = new ArrayList<>(regions.size());
        for (Region r : regions.values()) {
            RegionDescriptor d = r.descriptor;
            out.add(new RegionInfo(new RegionDescriptor(d.id(), d.length(), 0, d.tag()), r.owner));
        }
        out.sort(Comparator.comparingLong(i -> i.descriptor().id()));
        return out;
    }

    /** For use in this process: the place is given back once the list is built. */
    List<RegionInfo> list() {
        listings.acquireUninterruptibly();
        try {
            return listRegions();
        } finally {
            listings.release();
        }
    }

    /**
     * For a reply to a client: the place is held until the transport has written the entries out (it cuts off a
     * client that does not read them within the hello timeout), so the listings in memory at once stay
     * {@value #CONCURRENT_LISTINGS}, not one per client that asked and never read.
     */
    RegionService.Listing listing() throws RemoteMemoryException {
        boolean placed;
        try {
            placed = listings.tryAcquire(LISTING_WAIT_MILLIS, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            placed = false;
        }
        if (!placed) {
            throw new RemoteMemoryException(Status.NO_CAPACITY, CONCURRENT_LISTINGS + " region listings are being "
                    + "sent to clients already (the limit); try again");
        }
        List<RegionInfo> regions;
        try {
            regions = listRegions();
        } catch (RuntimeException | Error e) {
            listings.release();
            throw e;
        }
        AtomicBoolean open = new AtomicBoolean(true);
        return new RegionService.Listing() {
            @Override
            public List<RegionInfo> regions() {
                return regions;
            }

            @Override
            public void close() {
                if (open.compareAndSet(true, false)) {
                    listings.release();
                }
            }
        };
    }

    /**
     * Listings in memory at once: one of the most regions allowed is a few megabytes of heap while it is built and
     * sent, so a few at a time, however many clients ask at once.
     */
    static final int CONCURRENT_LISTINGS = 4;
    /**
     * How long a listing waits for a place: honest listings take milliseconds, and a client that cannot have one now
     * is better told so than kept waiting behind clients that do not read theirs.
     */
    static final long LISTING_WAIT_MILLIS = 2000;

    /** Listings held now, being built or sent (for tests). */
    int listingsHeld() {
        return CONCURRENT_LISTINGS - listings.availablePermits();
    }

    void release(ClientSession c, long id, long key) throws RemoteMemoryException {
        Region r;
        synchronized (control) {
            r = checked(id, key);
            leases.check(c, r.descriptor.tag().volume(), "release its regions");
            if (!regions.remove(id, r)) {
                return;
            }
        }
        if (released(r)) {
            log.debug("released {}", r.descriptor);
        }
    }

    /**
     * Drops a region taken out of the table: it counts against the capacity and the region limit until its memory is
     * really unmapped, when its last pin ends ({@link #unmapped}); meanwhile it is {@linkplain Stats#lingeringBytes
     * lingering}. True the first time.
     */
    private boolean released(Region r) {
        lingering.add(r); // before the release, whose unmapping (at once when nothing pins it) takes it out again
        boolean first = r.release();
        if (r.unmapped()) {
            lingering.remove(r); // released before, and unmapped since
        }
        return first;
    }

    /** A region's memory was unmapped: what it granted is free again. */
    private void unmapped(Region r) {
        lingering.remove(r);
        granted.addAndGet(-rounded(r.descriptor.length()));
        regionSlots.decrementAndGet();
    }

    RegionDescriptor retag(ClientSession c, long id, long key, RegionTag tag) throws RemoteMemoryException {
        synchronized (control) {
            Region r = checked(id, key);
            RegionDescriptor d = r.descriptor;
            if (!d.tag().volume().equals(tag.volume())) {
                throw new RemoteMemoryException(Status.BAD_REQUEST, "region " + id + " belongs to volume '"
                        + d.tag().volume() + "'; a retag cannot move it to volume '" + tag.volume() + "'");
            }
            leases.check(c, d.tag().volume(), "retag its regions");
            RegionDescriptor retagged = new RegionDescriptor(d.id(), d.length(), d.key(), tag);
            r.descriptor = retagged;
            log.debug("client {}: retagged region {} from {} to {}", c.id, id, d.tag(), tag);
            return retagged;
        }
    }

    // ------------------------------------------------------------------------------------------------ leases

    /**
     * Grants {@code c} the lease ({@link Leases#grant}). A grant in a new epoch is answered only once every access to
     * the volume's regions under an older epoch has ended (the drained takeover): the keys rotate first, so no access
     * can start with an old key, then every other connection with an operation in flight on the volume is cut off (it
     * is fenced: whatever it still sends must not land) and its operations end; if they do not within {@link
     * #DRAIN_MILLIS}, the grant binds nobody and is refused, to be asked again.
     */
    Lease lease(ClientSession c, String volume, String owner, long ttlMillis, long leaseId)
            throws RemoteMemoryException {
        Leases.Grant g;
        List<RegionPin> inFlight;
        synchronized (control) {
            g = leases.grant(c, volume, owner, ttlMillis, leaseId, this::rotateKeys, this::volumesWithRegions);
            if (g.renewal()) {
                return g.lease();
            }
            inFlight = TakeoverDrain.inFlight(clients, volume, c);
        }
        boolean drained = false;
        try {
            drained = inFlight.isEmpty() || TakeoverDrain.drained(volume, g.lease().epoch(), inFlight, DRAIN_MILLIS);
        } finally {
            if (!drained) { // timed out, or failed: the grant binds nobody, and the next one drains again
                synchronized (control) {
                    leases.abandon(c, volume, g.lease().epoch());
                }
            }
        }
        if (!drained) {
            throw new RemoteMemoryException(Status.LEASE_HELD, "volume '" + volume + "': operations of the previous "
                    + "holder are still in flight after " + DRAIN_MILLIS + " ms; try again");
        }
        return g.lease();
    }

    /**
     * How long a grant in a new epoch waits for the accesses under older epochs to end, once their connections are cut
     * (a transfer blocked on a closed socket ends at once): well within a bridge's operation timeout (5 s), which the
     * grantee's LEASE is waiting under.
     */
    static final long DRAIN_MILLIS = 3_000;

    void unlease(ClientSession c, String volume, String owner, long leaseId) {
        synchronized (control) {
            leases.giveBack(c, volume, owner, leaseId);
        }
    }

    /** The volumes that have regions: their lease entries must be kept (a takeover after them must fence). */
    private Set<String> volumesWithRegions() {
        Set<String> volumes = new HashSet<>();
        for (Region r : regions.values()) {
            volumes.add(r.descriptor.tag().volume());
        }
        return volumes;
    }

    /** New random keys for every region of a volume. Call under {@link #control}. */
    private int rotateKeys(String volume) {
        int n = 0;
        for (Region r : regions.values()) {
            RegionDescriptor d = r.descriptor;
            if (d.tag().volume().equals(volume)) {
                long key;
                do {
                    key = random.nextLong();
                } while (key == 0 || key == d.key());
                r.descriptor = new RegionDescriptor(d.id(), d.length(), key, d.tag());
                n++;
            }
        }
        return n;
    }

    /**
     * A connection ended: the regions it allocated without holding their volume's lease were its scratch memory
     * (ping's, bench's) and nobody else's; they go now, as a client that vanished cannot release them.
     */
    private void scratchEnded(ClientSession c) {
        List<Long> gone = new ArrayList<>();
        long bytes = 0;
        for (Region r : regions.values()) {
            if (r.scratch && r.ownerId == c.id && regions.remove(r.descriptor.id(), r) && released(r)) {
                gone.add(r.descriptor.id());
                bytes += r.descriptor.length();
            }
        }
        if (!gone.isEmpty()) {
            log.info("client {} '{}' left {} scratch region(s) ({} bytes) behind; released", c.id, c.name,
                    gone.size(), bytes);
            RemoteListener l = listener;
            if (l != null) {
                l.withdraw(gone).whenComplete((v, e) -> {
                    if (e != null) {
                        log.warn("regions {}: withdrawing clients' direct access failed: {}", gone, e.toString());
                    }
                });
            }
        }
    }

    /**
     * Operator action: takes a region away from whoever holds it (leases do not bind operators). Its next operation
     * fails NO_SUCH_REGION; on a transport that handed out remote keys (ucx) every holder is made to drop the key
     * first (or is disconnected), and the memory is unmapped only then.
     */
    public boolean revoke(long id) {
        Region r = regions.remove(id);
        if (r != null && released(r)) {
            log.info("revoked {}", r.descriptor);
            RemoteListener l = listener;
            if (l != null) {
                l.withdraw(List.of(id)).whenComplete((v, e) -> {
                    if (e != null) {
                        log.warn("region {}: withdrawing clients' direct access failed: {}", id, e.toString());
                    }
                });
            }
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

    /**
     * Pins a range for one operation of {@code c}. The pin joins {@code c}'s operations in flight before the key is
     * checked a second time, and a grant in a new epoch rotates the key before it looks for operations in flight
     * ({@link #lease}): so either this sees the new key and refuses, or the grant sees this pin and waits for it.
     */
    RegionPin pin(ClientSession c, long id, long key, long offset, long length) throws RemoteMemoryException {
        Region r = checked(id, key);
        if (offset < 0 || length < 0 || offset > r.descriptor.length() - length) {
            throw new RemoteMemoryException(Status.OUT_OF_RANGE, "range " + offset + "+" + length
                    + " is outside region " + id + " (" + r.descriptor.length() + " bytes)");
        }
        if (!r.pin()) {
            throw new RemoteMemoryException(Status.NO_SUCH_REGION, "region " + id + " was released");
        }
        RegionPin p = new RegionPin(r, c, offset, r.memory.segment().asSlice(offset, length));
        c.pins.add(p);
        if (r.descriptor.key() != key) {
            p.close();
            throw new RemoteMemoryException(Status.ACCESS_DENIED, "wrong access key for region " + id);
        }
        return p;
    }

    void zero(ClientSession c, long id, long key, long offset, long length) throws RemoteMemoryException {
        try (RegionPin p = pin(c, id, key, offset, length)) {
            p.region.zero(offset, length);
        }
    }

    // ------------------------------------------------------------------------------------------------- admin

    /** A connected client as an operator sees it. */
    public record ClientView(long id, String name, String address, String state, int regions, long bytes,
                             ConnectionStats.Snapshot stats) {
    }

    public List<ClientView> clients() {
        List<ClientView> out = new ArrayList<>();
        for (ClientSession c : clients) {
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
        return list();
    }

    /**
     * A volume lease as an operator sees it. {@code state}: {@code held} (live), {@code expired} (not renewed within
     * its ttl), {@code released} (its holder's connection ended) or {@code given back}; only a held lease binds
     * anyone.
     */
    public record LeaseView(String volume, String owner, long clientId, String clientName, String address,
                            String state, long ttlMillis, long remainingMillis) {
    }

    public List<LeaseView> leases() {
        synchronized (control) {
            return leases.views();
        }
    }

    /** Operator action: cuts a client's connection. Its regions stay (it may reconnect and reattach). */
    public boolean disconnect(long clientId) {
        for (ClientSession c : clients) {
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

    /**
     * Why this memserver should not be sent new clients, or null when it should: it is draining, or its listener
     * cannot accept connections any more (its accept thread ended, its socket closed under it). For readiness checks.
     */
    public String notReadyReason() {
        if (draining) {
            return "draining: refusing new clients and grants";
        }
        RemoteListener l = listener;
        String problem = l == null ? null : l.problem();
        return problem == null ? null : "the " + config.transport() + " listener at " + address().getHostString()
                + ":" + address().getPort() + " takes no new clients: " + problem;
    }

    public long capacityBytes() {
        return config.capacityBytes();
    }

    /** Whether the NIC refuses the remote keys this memserver withdraws (the ucx transport on RDMA), and why. */
    public dev.rbridge.rdma.KeyEnforcement keysEnforced() {
        RemoteListener l = listener;
        return l == null ? dev.rbridge.rdma.KeyEnforcement.NO_REMOTE_KEYS : l.keysEnforced();
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

    /** {@code c}'s connection ended: its leases bind nobody, its scratch regions go, its counters move to the totals. */
    void ended(ClientSession c) {
        synchronized (control) {
            leases.ended(c);
        }
        scratchEnded(c);
        synchronized (transportTotals) {
            ConnectionStats st = c.stats;
            if (st != null) {
                departed.add(st.snapshot());
            }
            clients.remove(c);
        }
        log.info("client {} '{}' from {} disconnected", c.id, c.name, c.peer);
        if (draining && clients.isEmpty()) {
            drained.complete(null);
        }
    }
}
