package dev.rbridge.ops.admin;

import dev.rbridge.memserver.ClientView;
import dev.rbridge.memserver.LeaseView;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.ops.http.AdminRules;
import dev.rbridge.ops.http.HttpError;
import dev.rbridge.ops.http.HttpRequest;
import dev.rbridge.ops.http.HttpResponse;
import dev.rbridge.ops.http.OpsHttpMetrics;
import dev.rbridge.ops.http.OpsHttpServer;
import dev.rbridge.ops.http.Refusal;
import dev.rbridge.ops.http.Routes;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.RegionInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.Map;
import java.util.function.LongPredicate;

/**
 * The memserver's operator interface: JSON over HTTP on the ops server, apart from the data transport so it works
 * the same whatever the transport. Reads need the memserver's token ({@code Authorization: Bearer TOKEN}) when one
 * is set; operations that change state always need it and are off without one ({@link AdminRules}).
 *
 * <pre>
 * GET  /clients                  id, name, address, state, regions, bytes and krping counters of each client
 * GET  /regions                  every region with its tag (volume, slab, replica, generation) and owner
 * GET  /leases                   every volume lease: volume, owner, client id, state, ttl and ms remaining
 * GET  /stats                    capacity, granted bytes, counts, refused connections
 * POST /clients/{id}/disconnect  cut a client's connection (its regions stay)
 * POST /regions/{id}/revoke      take a region away
 * POST /drain                    refuse new clients and grants; the memserver exits when the last client leaves
 * POST /shutdown                 exit now
 * </pre>
 */
public final class MemserverAdminHttpServer implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(MemserverAdminHttpServer.class);

    /** Transport counters, per client and summed over the connected ones. */
    record Transport(long sendMessages, long sendBytes, long recvMessages, long recvBytes, long readOps,
            long readBytes, long writeOps, long writeBytes) {
        static Transport of(ConnectionStats.Snapshot s) {
            return new Transport(s.sendMessages(), s.sendBytes(), s.recvMessages(), s.recvBytes(), s.readOps(),
                    s.readBytes(), s.writeOps(), s.writeBytes());
        }

        Transport plus(Transport o) {
            return new Transport(sendMessages + o.sendMessages, sendBytes + o.sendBytes,
                    recvMessages + o.recvMessages, recvBytes + o.recvBytes, readOps + o.readOps,
                    readBytes + o.readBytes, writeOps + o.writeOps, writeBytes + o.writeBytes);
        }
    }

    record Client(long id, String name, String address, String state, long regions, long bytes, Transport stats) {
    }

    record Region(long id, long length, String volume, long slab, int replica, long generation, String owner) {
    }

    record Lease(String volume, String owner, long clientId, String clientName, String address, String state,
            long ttlMs, long remainingMs) {
    }

    record Stats(long capacityBytes, long grantedBytes, long regions, int clients, long refusedConnections,
            boolean draining, Transport connectedClientsTransport) {
    }

    private final OpsHttpServer http;
    private final Memserver memserver;
    private final Runnable exit;

    /**
     * @param exit what shutdown and a finished drain do (the command line stops the process)
     */
    public MemserverAdminHttpServer(InetSocketAddress address, Memserver memserver, String token, Runnable exit)
            throws IOException {
        this(address, memserver, token, exit, OpsHttpMetrics.NONE);
    }

    /**
     * @param token   the memserver's token, or null: reads are then open and operations that change state off
     * @param metrics where the server's refusals are counted
     */
    public MemserverAdminHttpServer(InetSocketAddress address, Memserver memserver, String token, Runnable exit,
            OpsHttpMetrics metrics) throws IOException {
        this.memserver = memserver;
        this.exit = exit;
        Routes routes = Routes.builder(new AdminRules(token, "memserver", "--token-file"))
                .read("/clients", r -> HttpResponse.json(200, clients(memserver.clients())))
                .read("/regions", r -> HttpResponse.json(200, regions(memserver.regions())))
                .read("/leases", r -> HttpResponse.json(200, leases(memserver.leases())))
                .read("/stats", r -> HttpResponse.json(200, stats()))
                .mutate("/clients/{id}/disconnect", this::disconnect)
                .mutate("/regions/{id}/revoke", this::revoke)
                .mutate("/drain", this::drain)
                .mutate("/shutdown", this::shutdown)
                .build();
        this.http = AdminHttp.start(address, routes, metrics, "");
        log.info("admin interface at http://{}:{}/{}", address().getHostString(), address().getPort(),
                token == null ? " (no token: reads open, drain/shutdown/revoke/disconnect off)" : "");
    }

    public InetSocketAddress address() {
        return http.address();
    }

    /** Connections open now, for the connections gauge. */
    public int openConnections() {
        return http.openConnections();
    }

    private HttpResponse disconnect(HttpRequest r) {
        return actOnId(r, memserver::disconnect, "client", "disconnected");
    }

    private HttpResponse revoke(HttpRequest r) {
        return actOnId(r, memserver::revoke, "region", "revoked");
    }

    /**
     * Does {@code action} to the {@code what} whose id the path names: 200 with {@code {done: id}}, or 404 when
     * there is no such {@code what} (the action answered false).
     */
    private static HttpResponse actOnId(HttpRequest r, LongPredicate action, String what, String done) {
        long id = parseId(r.param("id"));
        if (!action.test(id)) {
            return HttpResponse.json(404, Map.of("error", "no " + what + " " + id));
        }
        log.info("admin: {} {} {} by an operator from {}", what, id, done, r.peer());
        return HttpResponse.json(200, Map.of(done, id));
    }

    private HttpResponse drain(HttpRequest r) {
        var drained = memserver.drain();
        log.info("admin: drain requested by an operator from {}", r.peer());
        // exit once drained, but not before the answer is out (exiting stops this server)
        return HttpResponse.json(202, new Draining(true, memserver.clients().size()))
                .afterSent(() -> drained.thenRunAsync(() -> {
                    log.info("drained: no clients left; exiting");
                    exit.run();
                }, t -> Thread.ofPlatform().start(t)));
    }

    record Draining(boolean draining, int clients) {
    }

    private HttpResponse shutdown(HttpRequest r) {
        log.info("shutdown requested by an operator from {}", r.peer());
        return HttpResponse.json(202, Map.of("shutting_down", true)).afterSent(exit);
    }

    private static long parseId(String s) {
        try {
            return Long.parseLong(s);
        } catch (NumberFormatException e) {
            throw new HttpError(400, Refusal.MALFORMED, "'" + s + "' is not an id");
        }
    }

    private Stats stats() {
        List<ClientView> clients = memserver.clients();
        Transport sum = new Transport(0, 0, 0, 0, 0, 0, 0, 0);
        for (ClientView c : clients) {
            sum = sum.plus(Transport.of(c.stats()));
        }
        return new Stats(memserver.capacityBytes(), memserver.grantedBytes(), memserver.regionCount(),
                clients.size(), memserver.refusedConnections(), memserver.draining(), sum);
    }

    static List<Client> clients(List<ClientView> clients) {
        return clients.stream().map(c -> new Client(c.id(), c.name(), c.address(), c.state(), c.regions(),
                c.bytes(), Transport.of(c.stats()))).toList();
    }

    static List<Region> regions(List<RegionInfo> regions) {
        return regions.stream().map(r -> new Region(r.descriptor().id(), r.descriptor().length(),
                r.descriptor().tag().volume(), r.descriptor().tag().slab(), r.descriptor().tag().replica(),
                r.descriptor().tag().generation(), r.owner())).toList();
    }

    static List<Lease> leases(List<LeaseView> leases) {
        return leases.stream().map(l -> new Lease(l.volume(), l.owner(), l.clientId(), l.clientName(), l.address(),
                l.state(), l.ttlMillis(), l.remainingMillis())).toList();
    }

    @Override
    public void close() {
        http.close();
    }
}
