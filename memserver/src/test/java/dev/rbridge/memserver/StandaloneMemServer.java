package dev.rbridge.memserver;

import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Test entry point: a memserver in its own JVM, so tests can SIGKILL and SIGSTOP it for real. Arguments:
 * PORT_FILE CAPACITY_BYTES TOKEN [TRANSPORT]. Writes "PORT ADMIN_PORT" to PORT_FILE once listening (the admin interface,
 * for an operator's revoke, is on 127.0.0.1 and guarded by the same token).
 */
public final class StandaloneMemServer {
    public static void main(String[] args) throws Exception {
        MemServer server = MemServer.start(new MemServerConfig(new InetSocketAddress("127.0.0.1", 0),
                Long.parseLong(args[1]), args[2], args.length > 3 ? args[3] : "tcp"));
        AdminHttpServer admin = new AdminHttpServer(new InetSocketAddress("127.0.0.1", 0), server, args[2],
                () -> System.exit(0));
        Path tmp = Path.of(args[0] + ".tmp");
        Files.writeString(tmp, server.address().getPort() + " " + admin.address().getPort());
        Files.move(tmp, Path.of(args[0]));
        Thread.currentThread().join();
    }
}
