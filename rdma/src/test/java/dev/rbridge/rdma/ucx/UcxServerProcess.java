package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ChildJvm;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RemoteListener;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * A ucx listener over {@link ArenaRegionServiceForTests} in a JVM of its own, for tests that stop the memserver side
 * for real (SIGSTOP, SIGCONT) and must outlive what UCX does to it then. {@link #main} is the child's entry point
 * (PORT_FILE TOKEN); {@link #start} runs it.
 */
final class UcxServerProcess implements AutoCloseable {
    private final ChildJvm jvm;
    final InetSocketAddress address;

    private UcxServerProcess(ChildJvm jvm, InetSocketAddress address) {
        this.jvm = jvm;
        this.address = address;
    }

    public static void main(String[] args) throws Exception {
        RemoteListener listener = new UcxProvider().listen(new ListenParams()
                .address(new InetSocketAddress("127.0.0.1", 0)), new ArenaRegionServiceForTests(args[1]));
        Path tmp = Path.of(args[0] + ".tmp");
        Files.writeString(tmp, String.valueOf(listener.address().getPort()));
        Files.move(tmp, Path.of(args[0]));
        Thread.currentThread().join();
    }

    static UcxServerProcess start(String token) throws IOException, InterruptedException {
        Path dir = Files.createTempDirectory("ucx-server");
        Path portFile = dir.resolve("port");
        Path log = dir.resolve("server.log");
        ProcessBuilder pb = new ProcessBuilder(ChildJvm.command(List.of(), UcxServerProcess.class,
                List.of(portFile.toString(), token))).redirectErrorStream(true).redirectOutput(log.toFile());
        ChildJvm jvm = ChildJvm.start("the ucx server process", pb, portFile, log);
        return new UcxServerProcess(jvm, new InetSocketAddress("127.0.0.1",
                Integer.parseInt(Files.readString(portFile).trim())));
    }

    void signal(String name) throws IOException, InterruptedException {
        jvm.signal(name);
    }

    @Override
    public void close() throws Exception {
        jvm.close();
    }
}
