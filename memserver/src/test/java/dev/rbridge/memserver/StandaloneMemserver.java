package dev.rbridge.memserver;

import com.sun.net.httpserver.HttpServer;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

/**
 * Test entry point: a memserver in its own JVM, so tests can SIGKILL and SIGSTOP it for real. Arguments:
 * PORT_FILE CAPACITY_BYTES TOKEN [TRANSPORT [HELLO_TIMEOUT_MS]]. Writes "PORT STATS_PORT" to PORT_FILE once
 * listening. The stats port (127.0.0.1) answers GET with the memserver's own counters a test reads
 * ({@link Memserver#stats()}: resident bytes and the refused peers by reason), one {@code name value} per line.
 *
 * <p>An operator's revoke comes as the line {@code revoke REGION_ID} on stdin and is answered on stdout with
 * {@code revoked REGION_ID} or {@code no region REGION_ID}. This line protocol stands in for the admin interface,
 * whose HTTP routes live in the ops module (which this module cannot use); it calls the same
 * {@link Memserver#revoke}, and ops's MemserverAdminHttpServerTest covers the route itself.
 */
public final class StandaloneMemserver {
    public static void main(String[] args) throws Exception {
        MemserverConfig config = new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), Long.parseLong(args[1]),
                args[2], args.length > 3 ? args[3] : "tcp");
        Memserver server = args.length > 4 ? Memserver.start(config, Duration.ofMillis(Long.parseLong(args[4])))
                : Memserver.start(config);
        HttpServer stats = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        stats.createContext("/", exchange -> {
            Memserver.Stats s = server.stats();
            StringBuilder b = new StringBuilder("resident_bytes " + s.residentBytes() + "\n");
            b.append("lingering_bytes ").append(s.lingeringBytes()).append('\n');
            b.append("connections ").append(server.connectionCount()).append('\n');
            s.refused().forEach((reason, n) -> b.append("refused.").append(reason).append(' ').append(n).append('\n'));
            byte[] body = b.toString().getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        stats.start();
        Path tmp = Path.of(args[0] + ".tmp");
        Files.writeString(tmp, server.address().getPort() + " " + stats.getAddress().getPort());
        Files.move(tmp, Path.of(args[0]));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null;) {
            if (line.startsWith("revoke ")) {
                long id = Long.parseLong(line.substring("revoke ".length()).strip());
                System.out.println(server.revoke(id) ? "revoked " + id : "no region " + id);
            } else {
                System.out.println("unknown request: " + line);
            }
            System.out.flush();
        }
        Thread.currentThread().join(); // the test's end of stdin closed: keep serving until killed
    }
}
