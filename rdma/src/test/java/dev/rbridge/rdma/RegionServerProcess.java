package dev.rbridge.rdma;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * A listener of one transport over {@link ArenaRegionServiceForTests} in a JVM of its own, for tests that stop the
 * memserver side for real (SIGSTOP, SIGCONT) and must outlive what that does to it: the rdma module cannot start a
 * memserver, which depends on it. {@link #main} is the child's entry point (TRANSPORT PORT_FILE TOKEN); {@link #start}
 * runs it.
 */
public final class RegionServerProcess implements AutoCloseable {
    private final ChildJvm jvm;
    public final InetSocketAddress address;

    private RegionServerProcess(ChildJvm jvm, InetSocketAddress address) {
        this.jvm = jvm;
        this.address = address;
    }

    public static void main(String[] args) throws Exception {
        RemoteListener listener = Providers.byName(args[0]).listen(new ListenParams()
                .address(new InetSocketAddress("127.0.0.1", 0)), new ArenaRegionServiceForTests(args[2]));
        Path tmp = Path.of(args[1] + ".tmp");
        Files.writeString(tmp, String.valueOf(listener.address().getPort()));
        Files.move(tmp, Path.of(args[1]));
        Thread.currentThread().join();
    }

    /** A listener of {@code transport} ("tcp", "ucx") admitting {@code token}, ready when this returns. */
    public static RegionServerProcess start(String transport, String token) throws IOException, InterruptedException {
        Path dir = Files.createTempDirectory(transport + "-server");
        Path portFile = dir.resolve("port");
        Path log = dir.resolve("server.log");
        ProcessBuilder pb = new ProcessBuilder(ChildJvm.command(List.of(), RegionServerProcess.class,
                List.of(transport, portFile.toString(), token))).redirectErrorStream(true).redirectOutput(log.toFile());
        ChildJvm jvm = ChildJvm.start("the " + transport + " server process", pb, portFile, log);
        return new RegionServerProcess(jvm, new InetSocketAddress("127.0.0.1",
                Integer.parseInt(Files.readString(portFile).trim())));
    }

    public void signal(String name) throws IOException, InterruptedException {
        jvm.signal(name);
    }

    @Override
    public void close() throws Exception {
        jvm.close();
    }
}
