package dev.rbridge.memserver;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Test entry point: a memserver in its own JVM, so tests can SIGKILL and SIGSTOP it for real. Arguments:
 * PORT_FILE CAPACITY_BYTES TOKEN [TRANSPORT]. Writes the port to PORT_FILE once listening.
 *
 * <p>An operator's revoke comes as the line {@code revoke REGION_ID} on stdin and is answered on stdout with
 * {@code revoked REGION_ID} or {@code no region REGION_ID}. This line protocol stands in for the admin interface,
 * whose HTTP routes live in the ops module (which this module cannot use); it calls the same
 * {@link MemServer#revoke}, and ops's MemServerAdminHttpServerTest covers the route itself.
 */
public final class StandaloneMemServer {
    public static void main(String[] args) throws Exception {
        MemServer server = MemServer.start(new MemServerConfig(new InetSocketAddress("127.0.0.1", 0),
                Long.parseLong(args[1]), args[2], args.length > 3 ? args[3] : "tcp"));
        Path tmp = Path.of(args[0] + ".tmp");
        Files.writeString(tmp, String.valueOf(server.address().getPort()));
        Files.move(tmp, Path.of(args[0]));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
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
