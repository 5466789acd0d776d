package dev.rbridge.cli;

import dev.rbridge.bridge.Bridge;
import dev.rbridge.bridge.BridgeConfig;
import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.memserver.MemserverConfig;
import dev.rbridge.ops.metrics.BridgeMeters;
import dev.rbridge.ops.metrics.MemserverMeters;
import dev.rbridge.ops.metrics.Telemetry;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.ListResourceBundle;
import java.util.concurrent.Callable;

/**
 * {@code rbridge demo}: the embedded default. Memservers and the bridge in one process, joined by the in-process
 * {@code local} transport (or loopback tcp), so one command gives the same NBD behaviour as a deployment.
 */
@Command(name = "demo",
        mixinStandardHelpOptions = true,
        resourceBundle = "dev.rbridge.cli.DemoCommand$Help",
        description = {
                "Run memservers and a bridge in this process and serve their volumes over NBD (the embedded default).",
                "Memory is used only for what is written; TRIM and WRITE_ZEROES give it back.",
                "Stops gracefully on SIGTERM or Ctrl-C: in-flight requests finish, then connections close."},
        footer = {"",
                "Export syntax: " + VolumeSpecs.SYNTAX,
                "",
                "Examples:",
                "  rbridge demo                                   nbd://" + Defaults.NBD_LISTEN + "/" + Defaults.EXPORT
                        + ", 1 GiB",
                "  rbridge demo --size 8G --unix /tmp/rb.sock     TCP off, nbd+unix:///disk?socket=/tmp/rb.sock",
                "  rbridge demo --memservers 2 --export disk,size=4G,replicas=2   every slab on both memservers",
                "  rbridge demo --listen 0.0.0.0:" + Defaults.NBD_PORT
                        + " --unix /tmp/rb.sock --export disk --export iso,size=64M,ro"})
final class DemoCommand implements Callable<Integer> {
    /** A bound on --memservers: every one is a memserver with threads of its own, all in this JVM. */
    private static final int MAX_MEMSERVERS = 16;

    @Option(names = "--export", paramLabel = "SPEC",
            description = "An export (a volume); repeatable. The first one is also the default export. Default: "
                    + Defaults.EXPORT + ".")
    List<String> exports = new ArrayList<>();

    @Option(names = "--size", paramLabel = "SIZE", defaultValue = Defaults.VOLUME_SIZE,
            description = "Size of exports that give none (K, M, G, T suffixes are binary). Default ${DEFAULT-VALUE}.")
    String size;

    @Option(names = "--memservers", paramLabel = "N", defaultValue = "" + Defaults.DEMO_MEMSERVERS,
            description = "How many memservers to run in this process. Default ${DEFAULT-VALUE}.")
    int memserverCount;

    @Option(names = "--transport", paramLabel = "NAME", defaultValue = Defaults.DEMO_TRANSPORT,
            description = "How the bridge reaches them: local (in-process calls) or tcp (loopback sockets)."
                    + " Default ${DEFAULT-VALUE}.")
    String transport;

    @CommandLine.Mixin
    BridgeProcessOptions process;

    @CommandLine.Mixin
    OpsEndpointOptions.Demo ops;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        List<VolumeSpec> volumes = volumes();
        try {
            process.swapSafety.apply("demo");
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        } catch (IllegalStateException e) {
            spec.commandLine().getErr().println("demo: " + e.getMessage());
            return 1;
        }
        List<Memserver> memservers = new ArrayList<>();
        Telemetry telemetry = ops.telemetry();
        Bridge bridge;
        try {
            bridge = startBridge(volumes, telemetry, memservers);
        } catch (IllegalArgumentException e) {
            memservers.forEach(Memserver::close);
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        } catch (RuntimeException | IOException e) {
            memservers.forEach(Memserver::close);
            spec.commandLine().getErr().println("demo: " + e.getMessage());
            return 1;
        }
        return new BridgeProcess("demo", bridge, process, ops, telemetry, () -> memservers.forEach(Memserver::close))
                .run(spec.commandLine().getErr());
    }

    /** The volumes to serve, once the options are checked; ParameterException when they are not right. */
    private List<VolumeSpec> volumes() {
        List<VolumeSpec> volumes = new ArrayList<>();
        try {
            long defaultSize = Sizes.parse(size);
            process.limits.validate(process.tls.settings());
            process.checkExposure("demo");
            for (String e : exports.isEmpty() ? List.of(Defaults.EXPORT) : exports) {
                volumes.add(VolumeSpecs.parse("export", e, defaultSize, Defaults.REPLICAS));
            }
            if (memserverCount < 1 || memserverCount > MAX_MEMSERVERS) {
                throw new IllegalArgumentException("--memservers must be 1 to " + MAX_MEMSERVERS);
            }
            if (!transport.equals("local") && !transport.equals("tcp")) {
                throw new IllegalArgumentException("--transport must be local or tcp");
            }
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        return volumes;
    }

    /**
     * Starts the memservers, adding each to {@code memservers} as it starts (the caller closes them when this
     * fails), and the bridge over them.
     */
    private Bridge startBridge(List<VolumeSpec> volumes, Telemetry telemetry, List<Memserver> memservers)
            throws IOException {
        // Each memserver could hold every volume, plus its allocation manifest: capacity is a limit, memory is only
        // used when written.
        long capacity = 0;
        for (VolumeSpec v : volumes) {
            capacity += v.size() + (1 << 20);
        }
        BridgeConfig.Builder b = BridgeConfig.builder().transport(transport).startWait(Duration.ZERO)
                .tcpCongestion(process.tcpCongestion);
        if (telemetry != null) {
            b.metrics(new BridgeMeters(telemetry.registry()));
        }
        for (int i = 0; i < memserverCount; i++) {
            Memserver m = Memserver.start(new MemserverConfig(new InetSocketAddress(Defaults.LOOPBACK, 0),
                    capacity, null, transport, false, false, process.tcpCongestion));
            memservers.add(m);
            b.memserver(m.address());
            if (telemetry != null) {
                // Several memservers in one registry: the memserver tag tells them apart, as the bridge names them.
                MemserverMeters.bind(telemetry.registry(), m,
                        m.address().getHostString() + ":" + m.address().getPort());
            }
        }
        volumes.forEach(b::volume);
        return Bridge.start(b.build());
    }

    /** demo's wording of the options it shares with serve (picocli looks them up by option name). */
    public static final class Help extends ListResourceBundle {
        @Override
        protected Object[][] getContents() {
            return new Object[][]{
                    {"listen", "TCP address to serve on; repeatable. Default " + Defaults.NBD_LISTEN
                            + " unless only --unix is given."},
                    {"unix", "Also (or only) serve on this Unix socket."},
                    {"admin", "Bridge operator interface (read-only JSON over HTTP) for rbridge admin --bridge;"
                            + " requests from web pages and, on loopback, for a Host that is not a loopback name are"
                            + " refused. Default ${DEFAULT-VALUE}."},
                    {"tcp-congestion", "TCP congestion control of the NBD connections accepted (and, with"
                            + " --transport tcp, of the memserver links)" + MemserverClientOptions.TCP_CONGESTION_HELP},
            };
        }
    }
}
