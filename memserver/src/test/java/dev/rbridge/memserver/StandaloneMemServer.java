package dev.rbridge.memserver;

import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Test entry point: a memserver in its own JVM, so tests can SIGKILL and SIGSTOP it for real. Arguments:
 * PORT_FILE CAPACITY_BYTES TOKEN [TRANSPORT]. Writes the bound port to PORT_FILE once listening.
 */
public final class StandaloneMemServer {
    public static void main(String[] args) throws Exception {
        MemServer server = MemServer.start(new MemServerConfig(new InetSocketAddress("127.0.0.1", 0),
                Long.parseLong(args[1]), args[2], args.length > 3 ? args[3] : "tcp"));
        Path tmp = Path.of(args[0] + ".tmp");
        Files.writeString(tmp, String.valueOf(server.address().getPort()));
        Files.move(tmp, Path.of(args[0]));
        Thread.currentThread().join();
    }
}
