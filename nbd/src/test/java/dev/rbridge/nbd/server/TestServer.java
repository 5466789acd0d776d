package dev.rbridge.nbd.server;

import dev.rbridge.nbd.device.BlockDevice;
import dev.rbridge.nbd.device.SparseMemoryDevice;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

/** A real {@link NbdServer} on a free loopback port and a Unix socket, with in-memory exports, for tests. */
public final class TestServer implements AutoCloseable {
    public final NbdServer server;
    public final Path socketDir;
    private final List<BlockDevice> devices;

    private TestServer(NbdServer server, Path socketDir, List<BlockDevice> devices) {
        this.server = server;
        this.socketDir = socketDir;
        this.devices = devices;
    }

    /** Exports: 'disk' (1 GiB), 'small' (16 MiB, 1 MiB max payload), 'ro' (16 MiB read-only), 'aligned' (min 512). */
    public static TestServer start() throws IOException {
        return start(b -> {
        });
    }

    public static TestServer start(Consumer<NbdServerConfig.Builder> customize) throws IOException {
        Path dir = Files.createTempDirectory("rbridge-test");
        List<BlockDevice> devices = new ArrayList<>();
        NbdServerConfig.Builder b = NbdServerConfig.builder()
                .listen(new ListenAddress.Tcp("127.0.0.1", 0))
                .listen(new ListenAddress.Unix(dir.resolve("nbd.sock")))
                .drainTimeout(Duration.ofSeconds(5));
        b.export(Export.of("disk", track(devices, new SparseMemoryDevice(1L << 30))));
        b.export(new Export("small", "16 MiB, 1 MiB payloads", track(devices, new SparseMemoryDevice(16 << 20)), false,
                1, 4096, 1 << 20));
        b.export(new Export("ro", "read-only", track(devices, new SparseMemoryDevice(16 << 20)), true, 1, 4096,
                Export.DEFAULT_MAXIMUM_PAYLOAD));
        b.export(new Export("aligned", "minimum block 512", track(devices, new SparseMemoryDevice(16 << 20)), false,
                512, 4096, Export.DEFAULT_MAXIMUM_PAYLOAD));
        customize.accept(b);
        return new TestServer(NbdServer.start(b.build()), dir, devices);
    }

    private static BlockDevice track(List<BlockDevice> devices, BlockDevice d) {
        devices.add(d);
        return d;
    }

    public String uri(String export) {
        return server.addresses().get(0).uri(export);
    }

    public String unixUri(String export) {
        return server.addresses().get(1).uri(export);
    }

    public int port() {
        return ((ListenAddress.Tcp) server.addresses().get(0)).port();
    }

    @Override
    public void close() throws IOException {
        server.close();
        devices.forEach(BlockDevice::close);
        try (var files = Files.list(socketDir)) {
            for (Path p : files.toList()) {
                Files.deleteIfExists(p);
            }
        }
        Files.deleteIfExists(socketDir);
    }
}
