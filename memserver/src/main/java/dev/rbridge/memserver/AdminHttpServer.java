package dev.rbridge.memserver;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.RegionInfo;
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
 * The memserver's operator interface: JSON over HTTP, apart from the data transport so it works the same whatever
 * the transport. Guarded by the memserver's token ({@code Authorization: Bearer TOKEN}) when one is set.
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
public final class AdminHttpServer implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(AdminHttpServer.class);

    private final HttpServer http;
    private final MemServer memserver;
    private final String token;
    private final Runnable exit;

    /**
     * @param exit what shutdown and a finished drain do (the command line stops the process)
     */
    public AdminHttpServer(InetSocketAddress address, MemServer memserver, String token, Runnable exit)
            throws IOException {
        this.memserver = memserver;
        this.token = token;
        this.exit = exit;
        try {
            this.http = HttpServer.create(address, 16);
        } catch (IOException e) {
            throw new IOException("cannot serve admin on " + address.getHostString() + ":" + address.getPort() + ": "
                    + e.getMessage(), e);
        }
        http.setExecutor(Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "memserver-admin");
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
                String expected = "Bearer " + token;
                if (auth == null || !MessageDigest.isEqual(auth.getBytes(StandardCharsets.UTF_8),
                        expected.getBytes(StandardCharsets.UTF_8))) {
                    log.warn("refused admin request {} {} from {}: wrong or missing token", ex.getRequestMethod(),
                            ex.getRequestURI().getPath(), ex.getRemoteAddress());
                    send(ex, 401, error("wrong or missing token"));
                    return;
                }
            }
            String method = ex.getRequestMethod();
            String[] path = ex.getRequestURI().getPath().replaceAll("^/+|/+$", "").split("/");
            String route = method + " " + String.join("/", path);
            if (route.equals("GET clients")) {
                send(ex, 200, clientsJson(memserver.clients()));
            } else if (route.equals("GET regions")) {
                send(ex, 200, regionsJson(memserver.regions()));
            } else if (route.equals("GET leases")) {
                send(ex, 200, leasesJson(memserver.leases()));
            } else if (route.equals("GET stats")) {
                List<MemServer.ClientView> clients = memserver.clients();
                long[] sum = new long[8];
                for (MemServer.ClientView c : clients) {
                    ConnectionStats.Snapshot st = c.stats();
                    long[] v = {st.sendMessages(), st.sendBytes(), st.recvMessages(), st.recvBytes(), st.readOps(),
                            st.readBytes(), st.writeOps(), st.writeBytes()};
                    for (int i = 0; i < 8; i++) {
                        sum[i] += v[i];
                    }
                }
                send(ex, 200, "{\"capacity_bytes\":" + memserver.capacityBytes() + ",\"granted_bytes\":"
                        + memserver.grantedBytes() + ",\"regions\":" + memserver.regionCount() + ",\"clients\":"
                        + clients.size() + ",\"refused_connections\":" + memserver.refusedConnections()
                        + ",\"draining\":" + memserver.draining() + ",\"connected_clients_transport\":{"
                        + "\"send_messages\":" + sum[0] + ",\"send_bytes\":" + sum[1] + ",\"recv_messages\":" + sum[2]
                        + ",\"recv_bytes\":" + sum[3] + ",\"read_ops\":" + sum[4] + ",\"read_bytes\":" + sum[5]
                        + ",\"write_ops\":" + sum[6] + ",\"write_bytes\":" + sum[7] + "}}");
            } else if (method.equals("POST") && path.length == 3 && path[0].equals("clients")
                    && path[2].equals("disconnect")) {
                long id = parseId(path[1]);
                boolean ok = memserver.disconnect(id);
                send(ex, ok ? 200 : 404, ok ? "{\"disconnected\":" + id + "}" : error("no client " + path[1]));
            } else if (method.equals("POST") && path.length == 3 && path[0].equals("regions")
                    && path[2].equals("revoke")) {
                long id = parseId(path[1]);
                boolean ok = memserver.revoke(id);
                send(ex, ok ? 200 : 404, ok ? "{\"revoked\":" + id + "}" : error("no region " + path[1]));
            } else if (route.equals("POST drain")) {
                var drained = memserver.drain();
                send(ex, 202, "{\"draining\":true,\"clients\":" + memserver.clients().size() + "}");
                // after the answer is out, and never on this thread: exiting joins the threads that stop this server
                drained.thenRunAsync(() -> {
                    log.info("drained: no clients left; exiting");
                    exit.run();
                }, r -> Thread.ofPlatform().start(r));
            } else if (route.equals("POST shutdown")) {
                send(ex, 202, "{\"shutting_down\":true}");
                log.info("shutdown requested by an operator");
                Thread.ofPlatform().start(exit);
            } else {
                send(ex, 404, error("no such admin operation: " + method + " " + ex.getRequestURI().getPath()
                        + " (GET clients|regions|leases|stats, POST clients/ID/disconnect|regions/ID/revoke|drain|shutdown)"));
            }
        } catch (IllegalArgumentException e) {
            send(ex, 400, error(e.getMessage()));
        } catch (RuntimeException e) {
            log.error("admin request failed", e);
            send(ex, 500, error(e.toString()));
        }
    }

    private static long parseId(String s) {
        try {
            return Long.parseLong(s);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("'" + s + "' is not an id");
        }
    }

    private static void send(HttpExchange ex, int status, String json) throws IOException {
        byte[] body = (json + "\n").getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", "application/json");
        ex.sendResponseHeaders(status, body.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
    }

    static String error(String message) {
        return "{\"error\":" + quote(message) + "}";
    }

    static String clientsJson(List<MemServer.ClientView> clients) {
        StringBuilder b = new StringBuilder("[");
        for (MemServer.ClientView c : clients) {
            if (b.length() > 1) {
                b.append(',');
            }
            ConnectionStats.Snapshot s = c.stats();
            b.append("{\"id\":").append(c.id()).append(",\"name\":").append(quote(c.name()))
                    .append(",\"address\":").append(quote(c.address())).append(",\"state\":").append(quote(c.state()))
                    .append(",\"regions\":").append(c.regions()).append(",\"bytes\":").append(c.bytes())
                    .append(",\"stats\":{\"send_messages\":").append(s.sendMessages())
                    .append(",\"send_bytes\":").append(s.sendBytes())
                    .append(",\"recv_messages\":").append(s.recvMessages())
                    .append(",\"recv_bytes\":").append(s.recvBytes())
                    .append(",\"read_ops\":").append(s.readOps()).append(",\"read_bytes\":").append(s.readBytes())
                    .append(",\"write_ops\":").append(s.writeOps()).append(",\"write_bytes\":").append(s.writeBytes())
                    .append("}}");
        }
        return b.append(']').toString();
    }

    static String regionsJson(List<RegionInfo> regions) {
        StringBuilder b = new StringBuilder("[");
        for (RegionInfo r : regions) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append("{\"id\":").append(r.descriptor().id()).append(",\"length\":").append(r.descriptor().length())
                    .append(",\"volume\":").append(quote(r.descriptor().tag().volume()))
                    .append(",\"slab\":").append(r.descriptor().tag().slab())
                    .append(",\"replica\":").append(r.descriptor().tag().replica())
                    .append(",\"generation\":").append(r.descriptor().tag().generation())
                    .append(",\"owner\":").append(quote(r.owner())).append('}');
        }
        return b.append(']').toString();
    }

    static String leasesJson(List<MemServer.LeaseView> leases) {
        StringBuilder b = new StringBuilder("[");
        for (MemServer.LeaseView l : leases) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append("{\"volume\":").append(quote(l.volume())).append(",\"owner\":").append(quote(l.owner()))
                    .append(",\"client_id\":").append(l.clientId())
                    .append(",\"client_name\":").append(quote(l.clientName()))
                    .append(",\"address\":").append(quote(l.address())).append(",\"state\":").append(quote(l.state()))
                    .append(",\"ttl_ms\":").append(l.ttlMillis()).append(",\"remaining_ms\":")
                    .append(l.remainingMillis()).append('}');
        }
        return b.append(']').toString();
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
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

    @Override
    public void close() {
        http.stop(0);
    }
}
