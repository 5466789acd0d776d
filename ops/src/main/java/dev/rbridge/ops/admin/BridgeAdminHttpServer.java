package dev.rbridge.ops.admin;

import dev.rbridge.bridge.Bridge;
import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Slab;
import dev.rbridge.bridge.volume.SlabState;
import dev.rbridge.bridge.volume.Volume;
import dev.rbridge.ops.http.AdminRules;
import dev.rbridge.ops.http.HttpRequest;
import dev.rbridge.ops.http.HttpResponse;
import dev.rbridge.ops.http.OpsHttpMetrics;
import dev.rbridge.ops.http.OpsHttpServer;
import dev.rbridge.ops.http.Routes;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The bridge's operator interface: JSON over HTTP on the ops server, guarded by the memservers' token (as a bearer
 * token) when one is configured and by the admin rules ({@link AdminRules}) for every request; the two operations
 * that change state (POST) need the token.
 *
 * <pre>
 * GET /volumes              each volume: size, slab size, replicas, state, slab counts by state
 * GET /volumes/{name}/slabs every allocated slab: state, generation, replicas, rebuild progress (?all=1: every slab)
 * GET /memservers           each memserver: state, instance, capacity, free bytes, operations in flight, last error
 * GET /rebuild              the slab being rebuilt, its progress, and how many wait
 * POST /memservers/{address}/add     use another memserver from now on (HOST:PORT)
 * POST /memservers/{address}/remove  stop using one that holds no live replica
 * POST /memservers/{address}/drain   move every replica off one, then stop using it
 * POST /volumes/{name}/grow/{bytes}  grow a volume while it serves (new NBD connections see the new size)
 * </pre>
 */
public final class BridgeAdminHttpServer implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(BridgeAdminHttpServer.class);

    record VolumeJson(String name, long size, long slabSize, int replicas, String state, int slabs, int allocated,
            int healthy, int degraded, int rebuilding, int lost) {
    }

    record SlabJson(int slab, long start, String state, long generation, String replicas, String building,
            long copied, long length) {
    }

    record MemserverJson(String memserver, String state, String instance, long capacity, long free, long inFlight,
            long downForMs, String lastError, boolean draining) {
    }

    /** The slab fields are absent (null) while nothing is being rebuilt. */
    record RebuildJson(int queued, String volume, Integer slab, String target, Long copied, Long length,
            int degradedSlabs, String waiting, long copiedTotal) {
    }

    private final OpsHttpServer http;
    private final Bridge bridge;

    public BridgeAdminHttpServer(InetSocketAddress address, Bridge bridge) throws IOException {
        this(address, bridge, OpsHttpMetrics.NONE);
    }

    public BridgeAdminHttpServer(InetSocketAddress address, Bridge bridge, OpsHttpMetrics metrics) throws IOException {
        this.bridge = bridge;
        String token = bridge.config().token().isEmpty() ? null : bridge.config().token();
        Routes routes = Routes.builder(new AdminRules(token, "bridge", "--token-file"))
                .read("/volumes", r -> HttpResponse.json(200, volumes()))
                .read("/volumes/{name}/slabs", this::slabs)
                .read("/memservers", r -> HttpResponse.json(200, memservers()))
                .read("/rebuild", r -> HttpResponse.json(200, rebuild()))
                .mutate("/memservers/{address}/add", this::addMemserver)
                .mutate("/memservers/{address}/remove", this::removeMemserver)
                .mutate("/memservers/{address}/drain", r -> {
                    String why = bridge.drainMemserver(r.param("address"));
                    return why == null ? HttpResponse.json(202, Map.of("draining", r.param("address")))
                            : HttpResponse.json(why.startsWith("no memserver") ? 404 : 409, Map.of("error", why));
                })
                .mutate("/volumes/{name}/grow/{bytes}", this::growVolume)
                .build();
        this.http = AdminHttp.start(address, routes, metrics, " (use --admin HOST:PORT or none)");
        log.info("admin interface at http://{}:{}/", address().getHostString(), address().getPort());
    }

    public InetSocketAddress address() {
        return http.address();
    }

    /** Connections open now, for the connections gauge. */
    public int openConnections() {
        return http.openConnections();
    }

    private HttpResponse addMemserver(HttpRequest r) {
        String address = r.param("address");
        int colon = address.lastIndexOf(':');
        int port;
        try {
            port = colon < 0 ? -1 : Integer.parseInt(address.substring(colon + 1));
        } catch (NumberFormatException e) {
            port = -1;
        }
        String host = colon < 0 ? "" : address.substring(0, colon).replaceAll("^\\[|\\]$", "");
        if (port < 1 || port > 65535 || host.isEmpty() || host.length() > 253) {
            return HttpResponse.json(400, Map.of("error", "a memserver is HOST:PORT, not '" + address + "'"));
        }
        InetSocketAddress a = new InetSocketAddress(host, port);
        if (a.isUnresolved()) {
            return HttpResponse.json(400, Map.of("error", "'" + host + "' does not resolve"));
        }
        MemserverLink l = bridge.addMemserver(a, "admin");
        return HttpResponse.json(200, Map.of("memserver", l.label(), "state", l.state().label()));
    }

    private HttpResponse growVolume(HttpRequest r) {
        long bytes;
        try {
            bytes = Long.parseLong(r.param("bytes"));
        } catch (NumberFormatException e) {
            bytes = -1;
        }
        if (bytes <= 0) {
            return HttpResponse.json(400, Map.of("error", "a size in bytes, not '" + r.param("bytes") + "'"));
        }
        Bridge.GrowRefusal refused = bridge.growVolume(r.param("name"), bytes, false);
        if (refused == null) {
            return HttpResponse.json(200, Map.of("volume", r.param("name"), "size", bytes));
        }
        int status = switch (refused.kind()) {
            case NO_VOLUME -> 404;
            case SIZE_OUT_OF_RANGE -> 400;
            case CONFLICT -> 409;
        };
        return HttpResponse.json(status, Map.of("error", refused.why()));
    }

    private HttpResponse removeMemserver(HttpRequest r) {
        String why = bridge.removeMemserver(r.param("address"), "admin");
        return why == null ? HttpResponse.json(200, Map.of("removed", r.param("address")))
                : HttpResponse.json(why.startsWith("no memserver") ? 404 : 409, Map.of("error", why));
    }

    private List<VolumeJson> volumes() {
        List<VolumeJson> out = new ArrayList<>();
        for (Volume v : bridge.volumes()) {
            Volume.VolumeStatus s = v.status();
            out.add(new VolumeJson(s.name(), s.size(), s.slabSize(), s.replicas(), s.state().label(), s.slabs(),
                    s.allocated(), s.healthy(), s.degraded(), s.rebuilding(), s.lost()));
        }
        return out;
    }

    private HttpResponse slabs(HttpRequest r) {
        String name = r.param("name");
        Volume v = bridge.volume(name);
        if (v == null) {
            return HttpResponse.json(404, Map.of("error", "no volume '" + name + "'"));
        }
        boolean all = r.queryHas("all", "1");
        List<SlabJson> out = new ArrayList<>();
        for (int i = 0; i < v.slabCount(); i++) {
            Volume.SlabStatus s = v.slabStatus(i);
            if (all || s.state() != SlabState.UNALLOCATED) {
                out.add(new SlabJson(s.index(), s.start(), s.state().label(), s.generation(),
                        String.join(" ", s.replicas()),
                        s.building() == null ? "" : s.building(), s.rebuildCopiedBytes(), s.length()));
            }
        }
        return HttpResponse.json(200, out);
    }

    private List<MemserverJson> memservers() {
        List<MemserverJson> out = new ArrayList<>();
        for (MemserverLink l : bridge.memservers()) {
            out.add(new MemserverJson(l.label(), l.state().label(), l.serverId(),
                    l.capacityBytes(), l.freeBytes(), l.inFlight.get(), l.downForMillis(), l.lastError(),
                    l.draining()));
        }
        return out;
    }

    private RebuildJson rebuild() {
        Slab s = bridge.rebuilder().current();
        int degraded = 0;
        for (Volume v : bridge.volumes()) {
            degraded += v.degraded().size();
        }
        int queued = bridge.rebuilder().queued();
        String waiting = bridge.rebuilder().waitingFor();
        long total = bridge.rebuilder().copiedBytes();
        if (s == null) {
            return new RebuildJson(queued, null, null, null, null, null, degraded, waiting, total);
        }
        Volume.SlabStatus st = s.volume().slabStatus(s.index());
        return new RebuildJson(queued, s.volume().name(), s.index(), st.building() == null ? "" : st.building(),
                st.rebuildCopiedBytes(), st.length(), degraded, waiting, total);
    }

    @Override
    public void close() {
        http.close();
    }
}
