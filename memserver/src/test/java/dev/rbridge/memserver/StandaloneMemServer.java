package dev.rbridge.memserver;

import com.sun.net.httpserver.HttpServer;

import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

/**
 * Test entry point: a memserver in its own JVM, so tests can SIGKILL and SIGSTOP it for real. Arguments:
 * PORT_FILE CAPACITY_BYTES TOKEN [TRANSPORT [HELLO_TIMEOUT_MS]]. Writes "PORT ADMIN_PORT STATS_PORT" to PORT_FILE once
 * listening: the admin interface (for an operator's revoke) is on 127.0.0.1 and guarded by the same token; the stats
 * port answers GET with the memserver's own counters a test reads ({@link MemServer#stats()}: resident bytes and the
 * refused peers by reason), one {@code name value} per line.
 */
public final class StandaloneMemServer {
    public static void main(String[] args) throws Exception {
        MemServerConfig config = new MemServerConfig(new InetSocketAddress("127.0.0.1", 0), Long.parseLong(args[1]),
                args[2], args.length > 3 ? args[3] : "tcp");
        MemServer server = args.length > 4 ? MemServer.start(config, Duration.ofMillis(Long.parseLong(args[4])))
                : MemServer.start(config);
        AdminHttpServer admin = new AdminHttpServer(new InetSocketAddress("127.0.0.1", 0), server, args[2],
                () -> System.exit(0));
        HttpServer stats = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        stats.createContext("/", exchange -> {
            MemServer.Stats s = server.stats();
            StringBuilder b = new StringBuilder("resident_bytes " + s.residentBytes() + "\n");
            s.refused().forEach((reason, n) -> b.append("refused.").append(reason).append(' ').append(n).append('\n'));
            byte[] body = b.toString().getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        stats.start();
        Path tmp = Path.of(args[0] + ".tmp");
        Files.writeString(tmp, server.address().getPort() + " " + admin.address().getPort() + " "
                + stats.getAddress().getPort());
        Files.move(tmp, Path.of(args[0]));
        Thread.currentThread().join();
    }
}
