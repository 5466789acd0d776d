package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.GatedAcceptor;
import dev.rbridge.rdma.KeyEnforcement;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.wire.Admission;
import dev.rbridge.rdma.wire.GatedListener;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * The memserver side of the ucx provider: control connections over TCP (one platform thread each) and one UCX worker
 * whose progress thread serves the data plane. Region memory is registered with UCX when a client first maps it
 * (MAP) and stays registered, and pinned, while any client may hold its remote key; clients only ever
 * GET and PUT it. Registering (which pins and faults in every page of a region on most NICs: seconds for many
 * GiB), packing its key and deregistering run on a registration thread of their own, never on the progress thread,
 * which goes on serving every client meanwhile. On RDMA the memserver's CPU takes no part in a transfer; over UCX's tcp transport UCX emulates GET
 * and PUT with active messages, which the progress thread answers.
 *
 * <p>Before memory stops being registered (a release, a lease taken over, the last mapping client gone) every client
 * holding its remote key is told to forget it (INVALIDATE) and answers once nothing it issued with the
 * key is in flight; a client that does not answer within the hello timeout is disconnected.
 *
 * <p>What a withdrawn key is worth depends on what UCX really does, as UCX itself reports it ({@link UcxKeyCheck}):
 * the memory domains the context opened and how its IB domain registers ({@link Ucx#serverKeys}), and the lanes of
 * each client's endpoint. On an RDMA device, with each registration its own memory region, and a client whose GETs
 * and PUTs go over RDMA lanes, deregistering makes the NIC refuse the old rkey: a lease taken over (fencing)
 * deregisters at once, before the new holder hears of its grant, so a bridge cut off on its control connection but not
 * on the fabric gets remote access errors from then on; an unanswered INVALIDATE, or a client gone, deregisters at
 * once too. Where UCX emulates GET and PUT (tcp), or a client reaches the memory over shared memory or cma, or the IB
 * domain caches registrations, no key is checked: there the memserver waits for the clients' answers, and keeps the
 * memory of a client that did not answer, or is gone, mapped for a grace period, so that writes it still had in flight
 * land in memory nobody else has yet. Such a listener says so once in its log and in {@link #keysEnforced}.
 *
 * <p>A fence (a lease taken over, a region revoked) or a disconnect closes the affected clients' UCX endpoints at once,
 * whatever their keys: on RDMA their queue pairs go with them.
 */
final class UcxListener extends GatedListener<UcxServerConnection> {
    /** How long registering a region with UCX, or waiting for another connection to, may take. */
    private static final long REGISTER_TIMEOUT_MILLIS = 30_000;
    private static final Logger log = LoggerFactory.getLogger(UcxListener.class);
    /** How long memory stays registered and mapped after a client that may still hold its key went away. */
    static final long GRACE_MILLIS = 10_000;

    /** Hello guards and INVALIDATE deadlines; a cancelled guard leaves the queue at once (see the tcp provider's). */
    static final ScheduledExecutorService TIMER = timer();

    private static ScheduledExecutorService timer() {
        java.util.concurrent.ScheduledThreadPoolExecutor t = new java.util.concurrent.ScheduledThreadPoolExecutor(1,
                r -> {
                    Thread thread = new Thread(r, "rdma-ucx-timer");
                    thread.setDaemon(true);
                    return thread;
                });
        t.setRemoveOnCancelPolicy(true);
        return t;
    }

    final UcpContext context;
    final UcxLoop loop;
    /** Registers, packs keys, deregisters: context calls, which the server context locks (mt workers shared). */
    private final java.util.concurrent.ExecutorService registrar = java.util.concurrent.Executors
            .newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "rdma-ucx-register");
                t.setDaemon(true);
                return t;
            });
    /** The worker's UCX address, sent to every client (UCX_CONNECT). */
    final ByteBuffer workerAddress;
    /** What every client reads over its new endpoint before its connect completes (UCX_PROBE). */
    final UcxProbeWord probe;
    /** Registered region memory by (region, key, length); guarded by itself. */
    private final Map<RegKey, Registration> registrations = new HashMap<>();
    private volatile boolean closed;
    /** Registrations pin pages to an RDMA NIC here (see {@link Ucx#registrationPinsPages}). */
    private final boolean pinsPages = Ucx.registrationPinsPages(System.getenv(), Ucx.rdmaDevices());
    /** Whether the NIC refuses a deregistered region's rkey, as far as this memserver's context goes. */
    private final KeyEnforcement contextKeys;
    /** Connections whose endpoint reaches region memory without the NIC checking keys; said once in the log. */
    private final Set<UcxServerConnection> unenforced = java.util.concurrent.ConcurrentHashMap.newKeySet();
    private final java.util.concurrent.atomic.AtomicBoolean unenforcedLogged =
            new java.util.concurrent.atomic.AtomicBoolean();

    record RegKey(long region, long key, long length) {
    }

    /** One registration of a region's memory, pinned while registered. */
    final class Registration {
        final RegKey id;
        final RegionService.Pin pin;
        final UcpMemory memory;
        final ByteBuffer rkey;
        final long address;
        /** Connections that were given the key; guarded by {@link #registrations}. */
        final Set<UcxServerConnection> mappers = new HashSet<>();
        boolean dead;
        /**
         * Completed by the creator once it has checked the region again after listing this (see {@link #map}): false
         * when the region went while UCX registered it. Until then nobody else hands out its key.
         */
        final CompletableFuture<Boolean> confirmed = new CompletableFuture<>();

        Registration(RegKey id, RegionService.Pin pin, Registered registered) {
            this.id = id;
            this.pin = pin;
            this.memory = registered.memory();
            this.rkey = registered.rkey();
            this.address = pin.memory().address();
        }
    }

    /** What registering gives, both made on the registration thread. */
    private record Registered(UcpMemory memory, ByteBuffer rkey) {
        static Registered of(UcpMemory memory) {
            return new Registered(memory, memory.getRemoteKeyBuffer());
        }
    }

    private UcxListener(ListenParams params, RegionService service, UcpContext context, KeyEnforcement contextKeys)
            throws Exception {
        super("ucx", params, service, TIMER);
        this.context = context;
        this.contextKeys = contextKeys;
        this.loop = new UcxLoop(context, "rdma-ucx-server-progress");
        try {
            this.workerAddress = loop.call(loop.worker::getAddress, 10_000);
            this.probe = loop.call(() -> new UcxProbeWord(context), REGISTER_TIMEOUT_MILLIS);
        } catch (Exception e) {
            loop.close();
            throw e;
        }
    }

    /** Control connections come through the shared {@link GatedListener}, as the tcp provider's. */
    static UcxListener start(ListenParams params, RegionService service) throws IOException {
        UcpContext context;
        KeyEnforcement keys;
        try {
            context = Ucx.serverContext();
            keys = Ucx.serverKeys();
        } catch (RemoteMemoryException e) {
            throw new IOException(e.getMessage(), e);
        }
        ServerSocketChannel ch = GatedAcceptor.bind(params.address());
        UcxListener l;
        try {
            l = new UcxListener(params, service, context, keys);
        } catch (Exception e) {
            ch.close();
            throw new IOException("UCX could not start a worker: " + e.getMessage(), e);
        }
        if (!keys.enforced()) {
            log.warn("withdrawn remote keys are not enforced by a NIC here ({}); this memserver keeps a fenced or "
                    + "vanished client's memory mapped for {} ms. Where UCX emulates GET and PUT, UCX 1.13 also aborts "
                    + "this memserver when a client goes away with reads outstanding; fine for testing, use "
                    + "--transport tcp to serve without RDMA", keys.reason(), GRACE_MILLIS);
        } else {
            log.info("withdrawn remote keys: {}", keys.reason());
        }
        l.accept(ch);
        return l;
    }

    @Override
    protected UcxServerConnection connection(SocketChannel channel, Admission admission) {
        return new UcxServerConnection(this, channel, admission);
    }

    /** How long a client may take to greet, to read a listing, or to forget the keys it is told to. */
    long helloTimeoutMillis() {
        return params().helloTimeout().toMillis();
    }

    // ------------------------------------------------------------------------------------------- registrations

    /**
     * The registration for a region's range {@code [0, length)}, made if need be, with {@code c} recorded as holding
     * its key. The key and range are checked by the memserver every time.
     */
    Registration map(UcxServerConnection c, RegionService.Session s, long region, long key, long length)
            throws RemoteMemoryException {
        while (true) {
            Registration reg = mapOnce(c, s, region, key, length);
            // Another connection's registration is usable once its creator confirmed it; one that turned out to be
            // for a withdrawn region is already unlisted and dropped, and looking again says why (or registers anew).
            if (confirmed(reg, region)) {
                return reg;
            }
        }
    }

    /** Waits, bounded like the registration itself, for the creator's re-check of a listed registration. */
    private static boolean confirmed(Registration reg, long region) throws RemoteMemoryException {
        try {
            return reg.confirmed.get(REGISTER_TIMEOUT_MILLIS, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.TimeoutException | java.util.concurrent.ExecutionException e) {
            throw new RemoteMemoryException(RemoteMemoryException.Status.INTERNAL, "region " + region
                    + ": the connection registering it with UCX did not confirm it within "
                    + REGISTER_TIMEOUT_MILLIS + " ms");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RemoteMemoryException(RemoteMemoryException.Status.INTERNAL, "region " + region
                    + ": interrupted waiting for its UCX registration");
        }
    }

    private Registration mapOnce(UcxServerConnection c, RegionService.Session s, long region, long key, long length)
            throws RemoteMemoryException {
        RegKey k = new RegKey(region, key, length);
        RegionService.Pin check = s.pin(region, key, 0, length); // NO_SUCH_REGION, ACCESS_DENIED, OUT_OF_RANGE
        Registration reg;
        synchronized (registrations) {
            reg = registrations.get(k);
            if (reg != null) {
                check.close();
                reg.mappers.add(c);
                return reg;
            }
        }
        // Clients write registered memory with one-sided RDMA the memserver never sees: the region counts as written
        // from here on, so no transport serves a page of it as never written. On an RDMA NIC the registration also
        // pins the pages, for as long as it lasts (this pin's life): the memserver must not give them back meanwhile.
        if (pinsPages) {
            check.heldByDevice();
        } else {
            check.exposed();
        }
        reg = new Registration(k, check, register(check, region, length));
        Registration raced;
        synchronized (registrations) {
            raced = registrations.putIfAbsent(k, reg);
            (raced != null ? raced : reg).mappers.add(c);
        }
        if (raced != null) {
            reg.dead = true;
            drop(reg, 0);
            return raced;
        }
        confirm(s, reg);
        log.debug("registered region {} ({} bytes) with UCX", region, length);
        return reg;
    }

    /**
     * Registers the memory {@code check} pins with UCX, on the registration thread, waiting a bounded time. When UCX
     * does not finish in time or fails, {@code check} is closed (once UCX is done with the memory) and the caller told.
     */
    private Registered register(RegionService.Pin check, long region, long length) throws RemoteMemoryException {
        CompletableFuture<Registered> registering = CompletableFuture.supplyAsync(() -> Registered.of(
                context.memoryMap(new UcpMemMapParams().setAddress(check.memory().address()).setLength(length)
                        .nonBlocking())),
                registrar);
        try {
            return registering.get(REGISTER_TIMEOUT_MILLIS, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            // UCX may still finish: what it registers is deregistered then, and only then is the region unpinned.
            registering.whenCompleteAsync((late, x) -> {
                if (late != null) {
                    deregister(late.memory(), region);
                }
                check.close();
            }, registrar);
            throw new RemoteMemoryException(RemoteMemoryException.Status.INTERNAL, "UCX did not register region "
                    + region + " (" + length + " bytes) within " + REGISTER_TIMEOUT_MILLIS + " ms");
        } catch (java.util.concurrent.ExecutionException | InterruptedException e) {
            check.close();
            Throwable cause = e instanceof java.util.concurrent.ExecutionException ? e.getCause() : e;
            throw new RemoteMemoryException(RemoteMemoryException.Status.INTERNAL, "UCX could not register region "
                    + region + " (" + length + " bytes): " + cause.getMessage());
        }
    }

    /**
     * Checks the region of a registration just listed again, and confirms the registration to whoever waits for it;
     * throws, having unlisted and dropped it, when the region went meanwhile.
     *
     * <p>The region may have been released, revoked or re-keyed while UCX registered it, and the withdrawal that came
     * with that found nothing to withdraw. Checking again now that this registration is listed closes the gap: any
     * later withdrawal finds it. Connections that found it listed meanwhile wait for this check (confirmed).
     */
    private void confirm(RegionService.Session s, Registration reg) throws RemoteMemoryException {
        RegKey k = reg.id;
        try {
            s.pin(k.region(), k.key(), 0, k.length()).close();
        } catch (RemoteMemoryException | RuntimeException gone) {
            boolean mine;
            synchronized (registrations) {
                mine = registrations.remove(k, reg);
            }
            reg.confirmed.complete(false); // before the drop: whoever waits must not wait on its failure too
            if (mine) { // otherwise a withdrawal took it and drops it
                reg.dead = true;
                drop(reg, 0);
            }
            throw gone;
        }
        reg.confirmed.complete(true);
    }

    /**
     * Withdraws every registration of these regions: the clients holding their keys forget them (or are
     * disconnected), then the memory is deregistered and unpinned; completes when the clients have answered and what
     * goes at once is unpinned. When {@code fence} (a lease taken over, a region revoked) and the NIC enforces
     * withdrawn keys, the memory is deregistered first and this completes once it is: whoever still writes with the
     * old key fails from then on.
     */
    CompletableFuture<Void> invalidate(Collection<Long> regions, boolean fence) {
        return invalidate(regions, fence, false, null);
    }

    /**
     * A lease taken over: as {@link #invalidate(Collection, boolean)} with {@code fence}, and it also closes the UCX
     * endpoint of every client holding a key of these regions at once, but {@code grantee}'s (the connection whose
     * grant fences the others, or null): a fenced client moves no more data, whatever keys it holds. A region revoked
     * by an operator is no fence of its client, which goes on with its other regions.
     */
    CompletableFuture<Void> fence(Collection<Long> regions, UcxServerConnection grantee) {
        return invalidate(regions, true, true, grantee);
    }

    private CompletableFuture<Void> invalidate(Collection<Long> regions, boolean fence, boolean cutHolders,
            UcxServerConnection spared) {
        Map<UcxServerConnection, List<Long>> perClient = new HashMap<>();
        List<Registration> victims = new ArrayList<>();
        synchronized (registrations) {
            registrations.values().removeIf(r -> {
                if (!regions.contains(r.id.region())) {
                    return false;
                }
                r.dead = true;
                victims.add(r);
                for (UcxServerConnection c : r.mappers) {
                    perClient.computeIfAbsent(c, x -> new ArrayList<>()).add(r.id.region());
                }
                return true;
            });
        }
        if (victims.isEmpty()) {
            return CompletableFuture.completedFuture(null);
        }
        if (cutHolders) {
            for (UcxServerConnection c : perClient.keySet()) {
                if (c != spared) {
                    c.cutDataPath();
                }
            }
        }
        boolean enforced = victims.stream().allMatch(this::enforced);
        if (fence && enforced) {
            CompletableFuture<?>[] gone = victims.stream().map(r -> drop(r, 0)).toArray(CompletableFuture[]::new);
            perClient.forEach(UcxServerConnection::invalidate); // they still forget the keys; nobody waits for it
            return CompletableFuture.allOf(gone);
        }
        List<CompletableFuture<Boolean>> answers = new ArrayList<>();
        perClient.forEach((c, ids) -> answers.add(c.invalidate(ids)));
        return CompletableFuture.allOf(answers.toArray(CompletableFuture[]::new)).thenCompose(x -> {
            boolean allAnswered = answers.stream().allMatch(CompletableFuture::join);
            List<Long> kept = new ArrayList<>();
            List<CompletableFuture<Void>> droppedNow = new ArrayList<>();
            for (Registration r : victims) {
                boolean now = allAnswered || enforced(r);
                if (now) {
                    droppedNow.add(drop(r, 0));
                } else {
                    kept.add(r.id.region());
                    drop(r, GRACE_MILLIS);
                }
            }
            if (!kept.isEmpty()) {
                log.info("region(s) {} stay registered for a grace period of {} ms: a client holding their key did "
                        + "not answer, and withdrawn keys are not NIC-enforced here", kept, GRACE_MILLIS);
            }
            // Complete once what goes now is deregistered and unpinned: a RELEASE answered after this finds the
            // region's memory unmapped and its bytes back in the capacity (memory kept for a grace period stays
            // counted, as lingering, until then).
            return CompletableFuture.allOf(droppedNow.toArray(CompletableFuture[]::new));
        });
    }

    /**
     * The regions of {@code volume} registered under a key they no longer have: a lease grant rotated the volume's
     * keys, and whoever holds those remote keys must forget them. Checked key by key with the memserver, so this
     * follows whatever rule decides when keys rotate.
     */
    List<Long> staleRegistrations(RegionService.Session s, String volume) {
        List<RegKey> registered;
        synchronized (registrations) {
            if (registrations.isEmpty()) {
                return List.of();
            }
            registered = new ArrayList<>(registrations.keySet());
        }
        Set<Long> ofVolume = new HashSet<>();
        for (dev.rbridge.rdma.RegionInfo r : s.list()) {
            if (r.descriptor().tag().volume().equals(volume)) {
                ofVolume.add(r.descriptor().id());
            }
        }
        Set<Long> stale = new HashSet<>();
        for (RegKey k : registered) {
            if (ofVolume.contains(k.region()) && !stale.contains(k.region())) {
                try {
                    s.pin(k.region(), k.key(), 0, k.length()).close();
                } catch (RemoteMemoryException e) {
                    stale.add(k.region());
                }
            }
        }
        return List.copyOf(stale);
    }

    /** Whether a registration of the region is listed now: what a client's remote key may be for. */
    boolean registered(long region) {
        synchronized (registrations) {
            return registrations.keySet().stream().anyMatch(k -> k.region() == region);
        }
    }

    @Override
    public CompletableFuture<Void> withdraw(Collection<Long> regionIds) {
        return invalidate(regionIds, true);
    }

    /** A connection ended: registrations nobody else maps are withdrawn after the grace period. */
    @Override
    protected void ended(UcxServerConnection c) {
        super.ended(c);
        List<Registration> orphans = new ArrayList<>();
        synchronized (registrations) {
            registrations.values().removeIf(r -> {
                if (r.mappers.remove(c) && r.mappers.isEmpty()) {
                    r.dead = true;
                    orphans.add(r);
                    return true;
                }
                return false;
            });
        }
        boolean enforced = contextKeys.enforced() && c.keys().enforced();
        for (Registration r : orphans) {
            drop(r, enforced ? 0 : GRACE_MILLIS);
        }
        if (!orphans.isEmpty() && !enforced) {
            log.info("client {} is gone: region(s) {} stay registered for a grace period of {} ms (withdrawn keys are "
                    + "not NIC-enforced for it: {})", c.peer(), orphans.stream().map(r -> r.id.region()).toList(),
                    GRACE_MILLIS, contextKeys.enforced() ? c.keys().reason() : contextKeys.reason());
        }
        unenforced.remove(c);
    }

    /**
     * Whether the NIC refuses {@code r}'s key once it is deregistered, for everyone who was given it: the context
     * registers each region on its own, and every client holding the key reaches it over RDMA lanes.
     */
    private boolean enforced(Registration r) {
        if (!contextKeys.enforced()) {
            return false;
        }
        synchronized (registrations) {
            return r.mappers.stream().allMatch(c -> c.keys().enforced());
        }
    }

    /** Whether the remote keys of this context are refused by the NIC once withdrawn, as far as it can tell. */
    KeyEnforcement contextKeys() {
        return contextKeys;
    }

    /** A client's endpoint turned out to reach region memory without the NIC checking keys: said once, counted. */
    void unenforced(UcxServerConnection c, String peer, KeyEnforcement keys) {
        unenforced.add(c);
        if (unenforcedLogged.compareAndSet(false, true)) {
            log.warn("client {}: withdrawn remote keys are not enforced by the NIC for it ({}); its memory stays "
                    + "mapped for {} ms after it is fenced or gone (further such clients are logged at debug level)",
                    peer, keys.reason(), GRACE_MILLIS);
        } else {
            log.debug("client {}: withdrawn remote keys are not enforced by the NIC for it ({})", peer, keys.reason());
        }
    }

    /**
     * Whether the remote keys handed out here are refused by the NIC once withdrawn: not when the context does not
     * register one region per registration on an RDMA NIC, nor while any connected client reaches the memory over
     * lanes that check no key (the first such client is named).
     */
    @Override
    public KeyEnforcement keysEnforced() {
        if (!contextKeys.enforced()) {
            return contextKeys;
        }
        for (UcxServerConnection c : unenforced) {
            KeyEnforcement k = c.keys();
            return new KeyEnforcement(false, unenforced.size() + " client(s) reach region memory over lanes that "
                    + "check no remote key, e.g. " + c.peer() + ": " + k.reason());
        }
        return contextKeys;
    }

    /** Deregisters (on the registration thread) and then unpins, after {@code delayMillis}; completes when done. */
    private CompletableFuture<Void> drop(Registration r, long delayMillis) {
        CompletableFuture<Void> done = new CompletableFuture<>();
        Runnable deregister = () -> registrar.execute(() -> {
            deregister(r.memory, r.id.region());
            r.pin.close();
            done.complete(null);
        });
        if (delayMillis <= 0) {
            deregister.run();
        } else {
            TIMER.schedule(deregister, delayMillis, TimeUnit.MILLISECONDS);
        }
        return done;
    }

    private static void deregister(UcpMemory memory, long region) {
        try {
            memory.deregister();
        } catch (Throwable e) {
            log.warn("UCX could not deregister region {}: {}", region, e.toString());
        }
    }

    // ------------------------------------------------------------------------------------------------- listener

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        super.close();
        List<Registration> all;
        synchronized (registrations) {
            all = new ArrayList<>(registrations.values());
            registrations.clear();
        }
        // The clients were cut off: deregister now (no more UCX traffic will be served), unpin.
        for (Registration r : all) {
            drop(r, 0);
        }
        registrar.shutdown(); // after the drops above
        loop.execute(probe::close);
        loop.close();
    }
}
