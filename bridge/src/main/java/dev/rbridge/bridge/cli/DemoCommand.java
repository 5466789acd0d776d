package dev.rbridge.bridge.cli;

import dev.rbridge.nbd.device.SparseMemoryDevice;
import dev.rbridge.nbd.server.Export;
import dev.rbridge.nbd.server.ListenAddress;
import dev.rbridge.nbd.server.NbdServer;
import dev.rbridge.nbd.server.NbdServerConfig;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;

/**
 * {@code rbridge demo}: everything in one process. Until the remote-memory modules land, exports are backed by the
 * in-memory sparse device (RAM is used only for what is written).
 */
@Command(name = "demo",
        mixinStandardHelpOptions = true,
        description = {
                "Run an NBD server with in-memory exports in this process (the embedded default).",
                "Memory is used only for blocks that are written; TRIM and WRITE_ZEROES give it back.",
                "Stops gracefully on SIGTERM or Ctrl-C: in-flight requests finish, then connections close."},
        footer = {"",
                "Examples:",
                "  rbridge demo                                   nbd://127.0.0.1:10809/disk, 1 GiB",
                "  rbridge demo --size 8G --unix /tmp/rb.sock     TCP off, nbd+unix:///disk?socket=/tmp/rb.sock",
                "  rbridge demo --listen 0.0.0.0:10809 --unix /tmp/rb.sock --export disk --export iso,size=64M,ro"})
final class DemoCommand implements Callable<Integer> {
    static final String DEFAULT_LISTEN = "127.0.0.1:10809";

    @Option(names = "--listen", paramLabel = "HOST:PORT",
            description = "TCP address to serve on; repeatable. Default " + DEFAULT_LISTEN + " unless only --unix is given.")
    List<String> listen = new ArrayList<>();

    @Option(names = "--unix", paramLabel = "PATH", description = "Also (or only) serve on this Unix socket.")
    Path unix;

    @Option(names = "--export", paramLabel = "NAME[,size=SIZE][,ro][,min-block=N][,description=TEXT]",
            description = "An export; repeatable. The first one is also the default export (empty name). Default: disk.")
    List<String> exports = new ArrayList<>();

    @Option(names = "--size", paramLabel = "SIZE", defaultValue = "1G",
            description = "Size of exports that give none (K, M, G, T suffixes are binary). Default ${DEFAULT-VALUE}.")
    String size;

    @Option(names = "--max-payload", paramLabel = "SIZE", defaultValue = "32M",
            description = "Largest READ or WRITE accepted, advertised to clients. Default ${DEFAULT-VALUE}.")
    String maxPayload;

    @Option(names = "--handshake-timeout", paramLabel = "SECONDS", defaultValue = "30",
            description = "Close a connection that has not finished its handshake by then. Default ${DEFAULT-VALUE}.")
    int handshakeTimeout;

    @Option(names = "--drain-timeout", paramLabel = "SECONDS", defaultValue = "10",
            description = "On shutdown, how long in-flight requests may take to finish. Default ${DEFAULT-VALUE}.")
    int drainTimeout;

    @Option(names = "--log-level", paramLabel = "LEVEL", defaultValue = "info",
            description = "error, warn, info, debug or trace. Default ${DEFAULT-VALUE}.")
    String logLevel;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        NbdServerConfig config;
        try {
            config = config();
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        NbdServer server = NbdServer.start(config);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.close();
            config.exports().forEach(e -> e.device().close());
        }, "shutdown"));
        for (ListenAddress a : server.addresses()) {
            System.out.println("rbridge demo: serving " + a.uri(config.defaultExport()));
        }
        System.out.flush();
        server.awaitTermination();
        return 0;
    }

    NbdServerConfig config() {
        NbdServerConfig.Builder b = NbdServerConfig.builder()
                .handshakeTimeout(Duration.ofSeconds(handshakeTimeout))
                .drainTimeout(Duration.ofSeconds(drainTimeout));
        List<String> tcp = listen.isEmpty() && unix == null ? List.of(DEFAULT_LISTEN) : listen;
        for (String t : tcp) {
            b.listen(ListenAddress.parseTcp(t));
        }
        if (unix != null) {
            b.listen(new ListenAddress.Unix(unix));
        }
        long defaultSize = Sizes.parse(size);
        int payload = Math.toIntExact(Sizes.parse(maxPayload));
        List<String> specs = exports.isEmpty() ? List.of("disk") : exports;
        List<SparseMemoryDevice> created = new ArrayList<>();
        try {
            for (String s : specs) {
                ExportSpec e = ExportSpec.parse(s);
                long bytes = e.size() != null ? e.size() : defaultSize;
                SparseMemoryDevice device = new SparseMemoryDevice(bytes);
                created.add(device);
                b.export(new Export(e.name(), e.description(), device, e.readOnly(), e.minimumBlockSize(),
                        Math.max(Export.DEFAULT_PREFERRED_BLOCK_SIZE, e.minimumBlockSize()), payload));
            }
            return b.build();
        } catch (RuntimeException e) {
            created.forEach(SparseMemoryDevice::close);
            throw e;
        }
    }
}
