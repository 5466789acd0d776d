package dev.rbridge.bridge.admin;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.rbridge.bridge.Bridge;
import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.volume.Slab;
import dev.rbridge.bridge.volume.Volume;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.List;
import java.util.concurrent.Executors;

/**
 * The bridge's operator interface: JSON over HTTP, read-only, guarded by the memservers' token (as a bearer token)
 * when one is configured.
 *
 * <pre>
 * GET /volumes              each volume: size, slab size, replicas, state, slab counts by state
 * GET /volumes/{name}/slabs every allocated slab: state, generation, replicas, rebuild progress (?all=1: every slab)
 * GET /memservers           each memserver: state, instance, capacity, free bytes, operations in flight, last error
 * GET /rebuild              the slab being rebuilt, its progress, and how many wait
 * </pre>
 */
public final class BridgeAdminHttpServer implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(BridgeAdminHttpServer.class);

    private final HttpServer http;
    private final Bridge bridge;
    private final String token;

    public BridgeAdminHttpServer(InetSocketAddress address, Bridge bridge) throws IOException {
        this.bridge = bridge;
        this.token = bridge.config().token().isEmpty() ? null : bridge.config().token();
        try {
            this.http = HttpServer.create(address, 16);
        } catch (IOException e) {
            throw new IOException("cannot serve admin on " + address.getHostString() + ":" + address.getPort() + ": "
                    + e.getMessage() + " (use --admin HOST:PORT or none)", e);
        }
        http.setExecutor(Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "bridge-admin");
            t.setDaemon(true);
            return t;
        }));
        http.createContext("/", this::handle);
        http.start();
        log.info("admin interface at http://{}:{}/", address().getHostString(), address().getPort());
    }

    public InetSocketAddress address() {
        return http.getAddress();
    }

    private void handle(HttpExchange ex) throws IOException {
        try (ex) {
            if (token != null) {
                String auth = ex.getRequestHeaders().getFirst("Authorization");
                if (auth == null || !MessageDigest.isEqual(auth.getBytes(StandardCharsets.UTF_8),
                        ("Bearer " + token).getBytes(StandardCharsets.UTF_8))) {
                    log.warn("refused admin request {} from {}: wrong or missing token", ex.getRequestURI().getPath(),
                            ex.getRemoteAddress());
                    send(ex, 401, error("wrong or missing token"));
                    return;
                }
            }
            if (!ex.getRequestMethod().equals("GET")) {
                send(ex, 405, error("the bridge's admin interface only answers GET"));
                return;
            }
            String path = ex.getRequestURI().getPath();
            String query = ex.getRequestURI().getQuery();
            String[] parts = path.replaceAll("^/+|/+$", "").split("/");
            if (path.equals("/volumes")) {
                send(ex, 200, volumes());
            } else if (parts.length == 3 && parts[0].equals("volumes") && parts[2].equals("slabs")) {
                Volume v = bridge.volume(parts[1]);
                if (v == null) {
                    send(ex, 404, error("no volume '" + parts[1] + "'"));
                } else {
                    send(ex, 200, slabs(v, query != null && query.contains("all=1")));
                }
            } else if (path.equals("/memservers")) {
                send(ex, 200, memservers());
            } else if (path.equals("/rebuild")) {
                send(ex, 200, rebuild());
            } else {
                send(ex, 404, error("unknown path " + path + " (volumes, volumes/NAME/slabs, memservers, rebuild)"));
            }
        } catch (RuntimeException e) {
            log.error("admin request failed", e);
        }
    }

    private String volumes() {
        StringBuilder b = new StringBuilder("[");
        for (Volume v : bridge.volumes()) {
            Volume.VolumeStatus s = v.status();
            if (b.length() > 1) {
                b.append(',');
            }
            b.append("{\"name\":").append(str(s.name())).append(",\"size\":").append(s.size())
                    .append(",\"slabSize\":").append(s.slabSize()).append(",\"replicas\":").append(s.replicas())
                    .append(",\"state\":").append(str(s.state())).append(",\"slabs\":").append(s.slabs())
                    .append(",\"allocated\":").append(s.allocated()).append(",\"healthy\":").append(s.healthy())
                    .append(",\"degraded\":").append(s.degraded()).append(",\"rebuilding\":").append(s.rebuilding())
                    .append(",\"lost\":").append(s.lost()).append('}');
        }
        return b.append(']').toString();
    }

    private static String slabs(Volume v, boolean all) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < v.slabCount(); i++) {
            Volume.SlabStatus s = v.slabStatus(i);
            if (!all && s.state().equals("unallocated")) {
                continue;
            }
            if (b.length() > 1) {
                b.append(',');
            }
            b.append("{\"slab\":").append(s.index()).append(",\"start\":").append(s.start())
                    .append(",\"state\":").append(str(s.state())).append(",\"generation\":").append(s.generation())
                    .append(",\"replicas\":").append(str(String.join(" ", s.replicas())))
                    .append(",\"building\":").append(str(s.building() == null ? "" : s.building()))
                    .append(",\"copied\":").append(s.rebuildCopiedBytes()).append(",\"length\":").append(s.length())
                    .append('}');
        }
        return b.append(']').toString();
    }

    private String memservers() {
        StringBuilder b = new StringBuilder("[");
        for (MemserverLink l : bridge.memservers()) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append("{\"memserver\":").append(str(l.label())).append(",\"state\":")
                    .append(str(l.state().name().toLowerCase(java.util.Locale.ROOT))).append(",\"instance\":")
                    .append(str(l.serverId())).append(",\"capacity\":").append(l.capacityBytes())
                    .append(",\"free\":").append(l.freeBytes()).append(",\"inFlight\":").append(l.inFlight.get())
                    .append(",\"downForMs\":").append(l.downForMillis())
                    .append(",\"lastError\":").append(str(l.lastError())).append('}');
        }
        return b.append(']').toString();
    }

    private String rebuild() {
        Slab s = bridge.rebuilder().current();
        StringBuilder b = new StringBuilder("{\"queued\":").append(bridge.rebuilder().queued());
        if (s != null) {
            Volume.SlabStatus st = s.volume().slabStatus(s.index());
            b.append(",\"volume\":").append(str(s.volume().name())).append(",\"slab\":").append(s.index())
                    .append(",\"target\":").append(str(st.building() == null ? "" : st.building()))
                    .append(",\"copied\":").append(st.rebuildCopiedBytes()).append(",\"length\":").append(st.length());
        }
        List<Volume> vs = bridge.volumes();
        int degraded = 0;
        for (Volume v : vs) {
            degraded += v.degraded().size();
        }
        return b.append(",\"degradedSlabs\":").append(degraded).append('}').toString();
    }

    static String str(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }

    private static String error(String message) {
        return "{\"error\":" + str(message) + "}";
    }

    private static void send(HttpExchange ex, int status, String body) throws IOException {
        byte[] bytes = (body + "\n").getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", "application/json");
        ex.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(bytes);
        }
    }

    @Override
    public void close() {
        http.stop(0);
    }
}
