package dev.rbridge.memserver;

import dev.rbridge.common.Printable;
import dev.rbridge.memory.AnonymousMemory;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.common.tls.X509Credentials;
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
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;

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
 * <p>The front of the memserver: the regions ({@link RegionTable}), the clients ({@link ConnectedClients}, each a
 * {@link ClientSession}) and the listings of regions ({@link RegionListings}) are their own; this class checks each
 * request against the leases and the limits and puts the pieces together.
 *
 * <p>What a peer can make this memserver hold is bounded: regions ({@code maxRegions}), leases (see {@link Leases}),
 * client names ({@value #MAX_CLIENT_NAME} bytes), and the regions listed at once ({@value #CONCURRENT_LISTINGS}
 * listings in memory at a time, each held until it is sent).
 */
public final class Memserver implements RegionService, AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Memserver.class);

    private final MemserverConfig config;
    private final String serverId = UUID.randomUUID().toString();
    /** The regions and what they hold of the capacity; changes that go with a lease check happen under control. */
    private final RegionTable regions;
    private final ConnectedClients clients = new ConnectedClients();
    private final ClientAdmission admission;
    /** Lists of every region, {@value #CONCURRENT_LISTINGS} in memory at a time. */
    private final RegionListings listings;
    /**
     * Guards {@link #leases} and makes each control operation's lease check and its effect on the region table one
     * step, so a key rotation never interleaves with an open that hands out a key or an allocate that adds a region.
     */
    private final Object control = new Object();
    /** The volume leases; guarded by {@link #control}. */
    private final Leases leases = new Leases();
    private volatile boolean draining;
    private final CompletableFuture<Void> drained = new CompletableFuture<>();
    private RemoteListener listener;

    private Memserver(MemserverConfig config) {
        this.config = config;
        this.regions = new RegionTable(config);
        this.admission = new ClientAdmission(config.token());
        this.listings = new RegionListings(CONCURRENT_LISTINGS, LISTING_WAIT_MILLIS, regions::infos);
    }

    /** Starts listening; fails with a clear message when the transport is unknown or the address is taken. */
    public static Memserver start(MemserverConfig config) throws IOException {
        return start(config, new ListenParams().helloTimeout());
    }

    /** As {@link #start(MemserverConfig)}, with another hello timeout (tests that wait it out). */
    static Memserver start(MemserverConfig config, Duration helloTimeout) throws IOException {
        RemoteMemoryProvider provider = Providers.byName(config.transport());
        Memserver server = new Memserver(config);
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
                config.tlsCertificates() == null ? ", in clear"
                        : ", TLS" + (config.tlsVerifyPeer()
                                ? " with client certificates"
                                : "")
                                + (provider.name().equals("ucx")
                                        ? " on the control connection (RDMA data is not encrypted)"
                                        : ""));
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
        return regions.grantedBytes();
    }

    public long refusedConnections() {
        return admission.refusedAuth();
    }

    /** The transport refused a peer (another protocol version, garbage, a connection limit) and logged why. */
    @Override
    public void refused(String reason, SocketAddress peer) {
        admission.refused(reason);
    }

    /**
     * Everything a metrics binding polls, in one consistent-enough pass (each figure is read once; none is on the data
     * path). Transport counters are totals over every client since start, departed ones included.
     */
    public Stats stats() {
        long resident = 0;
        for (Region r : regions.all()) {
            resident += r.residentBytes();
        }
        long lingeringBytes = 0;
        for (Region r : regions.lingering()) {
            long n = r.residentBytes();
            resident += n;
            lingeringBytes += r.descriptor.length();
        }
        ConnectionStats.Snapshot total = clients.transportTotals();
        return new Stats(config.transport(), config.capacityBytes(), regions.grantedBytes(), resident, regions.size(),
                clients.size(), admission.refusedByReason(), draining, total, lingeringBytes);
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
        return config.token() == null ? null : dev.rbridge.rdma.TokenProof.server(config.token(), transcript);
    }

    @Override
    public Session open(Credential credential, String clientName, SocketAddress peer) throws RemoteMemoryException {
        admission.admit(credential, clientName, peer, draining);
        String address = peer instanceof InetSocketAddress i ? i.getHostString() + ":" + i.getPort()
                : String.valueOf(peer);
        ClientSession c = clients.add(this, Printable.cut(clientName, MAX_CLIENT_NAME), address);
        log.info("client {} '{}' connected from {}", c.id, c.name, peer);
        return c;
    }

    /** Client names are cut to this many bytes (UTF-8): they are listed with every region the client allocated. */
    public static final int MAX_CLIENT_NAME = 128;

    ServerInfo info() {
        return new ServerInfo(serverId, 1, config.capacityBytes(), config.capacityBytes() - regions.grantedBytes());
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
        synchronized (control) { // early, so a refusal is not reported as NO_CAPACITY
            leases.check(c, tag.volume(), "allocate regions of it");
        }
        long rounded = regions.reserve(length);
        AnonymousMemory memory = regions.map(length, rounded);
        RegionDescriptor d = regions.newDescriptor(length, tag);
        Region region;
        try {
            synchronized (control) {
                leases.check(c, tag.volume(), "allocate regions of it"); // again: a lease may have been taken meanwhile
                boolean volumeData = leases.holds(c, tag.volume());
                region = regions.add(d, memory, c.name, c.id, !volumeData);
            }
        } catch (RemoteMemoryException e) {
            memory.close();
            regions.unreserve(rounded);
            throw e;
        }
        log.debug("client {}: granted {}{}", c.id, d, region.scratch ? " (scratch: released when it disconnects)"
                : "");
        return d;
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

    /** Every region, keys withheld (see {@link RegionListings}); for use in this process. */
    List<RegionInfo> list() {
        return listings.list();
    }

    /** Every region, keys withheld, for a reply to a client: see {@link RegionListings#listing}. */
    RegionService.Listing listing() throws RemoteMemoryException {
        return listings.listing();
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
        return listings.held();
    }

    void release(ClientSession c, long id, long key) throws RemoteMemoryException {
        Region r;
        synchronized (control) {
            r = regions.checked(id, key);
            leases.check(c, r.descriptor.tag().volume(), "release its regions");
            if (!regions.remove(id, r)) {
                return;
            }
        }
        if (regions.released(r)) {
            log.debug("released {}", r.descriptor);
        }
    }

    RegionDescriptor retag(ClientSession c, long id, long key, RegionTag tag) throws RemoteMemoryException {
        synchronized (control) {
            Region r = regions.checked(id, key);
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
            g = leases.grant(c, volume, owner, ttlMillis, leaseId, regions::rotateKeys, regions::volumes);
            if (g.renewal()) {
                return g.lease();
            }
            inFlight = TakeoverDrain.inFlight(clients.all(), volume, c);
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

    /**
     * A connection ended: the regions it allocated without holding their volume's lease were its scratch memory
     * (ping's, bench's) and nobody else's; they go now, as a client that vanished cannot release them.
     */
    private void scratchEnded(ClientSession c) {
        List<Long> gone = new ArrayList<>();
        long bytes = 0;
        for (Region r : regions.removeScratch(c.id)) {
            gone.add(r.descriptor.id());
            bytes += r.descriptor.length();
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
        Region r = regions.revoke(id);
        if (r != null) {
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

    /**
     * Pins a range for one operation of {@code c}. The pin joins {@code c}'s operations in flight before the key is
     * checked a second time, and a grant in a new epoch rotates the key before it looks for operations in flight
     * ({@link #lease}): so either this sees the new key and refuses, or the grant sees this pin and waits for it.
     */
    RegionPin pin(ClientSession c, long id, long key, long offset, long length) throws RemoteMemoryException {
        Region r = regions.checked(id, key);
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

    public List<ClientView> clients() {
        List<ClientView> out = new ArrayList<>();
        for (ClientSession c : clients.all()) {
            int n = 0;
            long bytes = 0;
            for (Region r : regions.all()) {
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

    public List<LeaseView> leases() {
        synchronized (control) {
            return leases.views();
        }
    }

    /** Operator action: cuts a client's connection. Its regions stay (it may reconnect and reattach). */
    public boolean disconnect(long clientId) {
        for (ClientSession c : clients.all()) {
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
        return problem == null ? null
                : "the " + config.transport() + " listener at " + address().getHostString()
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
        for (Long id : regions.ids()) {
            revoke(id);
        }
        log.info("memserver {} stopped", serverId);
    }

    /**
     * {@code c}'s connection ended: its leases bind nobody, its scratch regions go, its counters move to the totals.
     */
    void ended(ClientSession c) {
        synchronized (control) {
            leases.ended(c);
        }
        scratchEnded(c);
        clients.remove(c);
        log.info("client {} '{}' from {} disconnected", c.id, c.name, c.peer);
        if (draining && clients.isEmpty()) {
            drained.complete(null);
        }
    }
}
