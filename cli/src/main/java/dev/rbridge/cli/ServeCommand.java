package dev.rbridge.cli;

import dev.rbridge.bridge.volume.VolumeSpec;

import dev.rbridge.bridge.Bridge;
import dev.rbridge.bridge.BridgeConfig;
import dev.rbridge.ops.metrics.BridgeMeters;
import dev.rbridge.ops.metrics.Telemetry;
import dev.rbridge.common.tls.X509Credentials;
import dev.rbridge.rdma.ConnectParams;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.ListResourceBundle;
import java.util.concurrent.Callable;

/** {@code rbridge serve}: the bridge. NBD exports backed by volumes on remote memservers. */
@Command(name = "serve",
        mixinStandardHelpOptions = true,
        resourceBundle = "dev.rbridge.cli.ServeCommand$Help",
        description = {
                "Serve NBD exports backed by volumes on memservers (rbridge memserver).",
                "A volume is cut into slabs; each slab is placed on REPLICAS memservers on its first write (power of",
                "two choices on free capacity, never two replicas on one memserver). Reads go to one live replica,",
                "writes to all of them and are acknowledged when every live replica has the data. A replica whose",
                "memserver dies or stops answering within --timeout is taken out and rebuilt on another memserver.",
                "A restarted bridge finds its volumes again in the memservers' region lists; a lease on every",
                "memserver keeps a second bridge from serving the same volume.",
                "Stops gracefully on SIGTERM or Ctrl-C."},
        footer = {"",
                "Volume syntax: " + VolumeSpecs.SYNTAX + " (default replicas: " + Defaults.REPLICAS + ", slab: 64M)",
                "",
                "Options may also come from --config FILE: one 'option = value' per line, without the leading",
                "dashes, repeated for repeatable options, '#' starts a comment. The command line adds to it.",
                "",
                "Example:",
                "  rbridge memserver --listen 10.0.0.5:" + Defaults.MEMSERVER_PORT
                        + " --capacity 64G --token-file /etc/rbridge/token",
                "  rbridge memserver --listen 10.0.0.6:" + Defaults.MEMSERVER_PORT
                        + " --capacity 64G --token-file /etc/rbridge/token",
                "  rbridge serve --memserver 10.0.0.5:" + Defaults.MEMSERVER_PORT + " --memserver 10.0.0.6:"
                        + Defaults.MEMSERVER_PORT + " --token-file /etc/rbridge/token \\",
                "                --volume disk,size=64G,replicas=2",
                "  nbd-client -N disk " + Defaults.LOOPBACK + " " + Defaults.NBD_PORT + " /dev/nbd0 -b 4096"})
public final class ServeCommand implements Callable<Integer> {
    @Option(names = "--config", paramLabel = "FILE", description = "Read options from FILE first (see below).")
    Path configFile;

    @Option(names = "--memserver", paramLabel = "HOST:PORT", description = "A memserver to use; repeatable. More"
            + " can be added while serving: rbridge admin --bridge ... add-memserver HOST:PORT.")
    List<String> memservers = new ArrayList<>();

    @Option(names = "--memserver-dns", paramLabel = "NAME[:PORT]", description = "Every address NAME resolves to is a"
            + " memserver (a Kubernetes headless Service, say): resolved at start and every 10 s, so memservers"
            + " join as the name lists them, and an address it no longer lists is dropped once it is down. Repeatable;"
            + " the port defaults to " + Defaults.MEMSERVER_PORT + ".")
    List<String> memserverNames = new ArrayList<>();

    @Option(names = "--volume", paramLabel = "SPEC", description = "A volume to export; repeatable. The first is also "
            + "the default export. Syntax below.")
    List<String> volumes = new ArrayList<>();

    @CommandLine.Mixin
    TokenOptions token;

    @Option(names = "--memserver-tls-certificates", paramLabel = "DIR",
            description = "Speak TLS to the memservers (started with --tls-certificates): DIR holds ca-cert.pem, the CA"
                    + " their certificates must chain to (and name the address given in --memserver), and"
                    + " client-cert.pem and client-key.pem for memservers that verify clients. With the ucx transport"
                    + " only the control connection is encrypted: RDMA data cannot be.")
    Path memserverTls;

    @Option(names = "--allow-shrink", description = "Start a volume configured smaller than the memservers hold it,"
            + " discarding the slabs past its new end (the log names them). Without it such a start is refused:"
            + " a smaller size= is more often a typo than a wish.")
    boolean allowShrink;

    @Option(names = "--hedge-reads", paramLabel = "on|off", defaultValue = "off",
            description = "Reads go to the replica whose memserver has the fewest operations in flight. With on, a"
                    + " read piece of up to 128 KiB on a slab with two or more live replicas also goes to a second"
                    + " replica when the first has not answered within the volume's hedge delay (the 95th percentile"
                    + " of its recent reads, 50 us to 20 ms), and the first answer wins: a stalling memserver then"
                    + " costs a read about one delay, not the stall. At most a tenth of reads are hedged, and only"
                    + " while the first memserver answers nothing else. For memservers on shared or overcommitted"
                    + " hosts; it costs a few percent of small-read throughput when nothing stalls."
                    + " Default ${DEFAULT-VALUE}.")
    String hedgeReads;

    @Option(names = "--splice-reads", paramLabel = "on|off", defaultValue = "on",
            description = "With on, the data of a READ of 64 KiB to a pipe's size (/proc/sys/fs/pipe-max-size) from one"
                    + " slab moves from the memserver's socket into the client's with splice(2), through a pipe,"
                    + " without being copied into the bridge; what the pipe cannot hold is copied. Applies only where"
                    + " neither the NBD connection nor the memserver link uses TLS, over the tcp transport."
                    + " Default ${DEFAULT-VALUE}.")
    String spliceReads;

    @CommandLine.Mixin
    MemserverLinkOptions.Bridge link;

    @Option(names = "--lease", paramLabel = "SECONDS", defaultValue = "" + Defaults.LEASE_SECONDS,
            description = "Ownership lease on each volume, renewed every third of it. A bridge that stops renewing"
                    + " (hung, cut off) can be replaced after this long; a bridge that exits frees it at once."
                    + " Default ${DEFAULT-VALUE}.")
    double lease;

    @Option(names = "--start-wait", paramLabel = "SECONDS", defaultValue = "" + Defaults.START_WAIT_SECONDS,
            description = "At start, wait this long for every memserver before serving without the missing ones."
                    + " Default ${DEFAULT-VALUE}.")
    double startWait;

    @Option(names = "--rebuild-rate", paramLabel = "SIZE", defaultValue = Defaults.REBUILD_RATE,
            description = "The most the rebuilds copy a second while clients do I/O, over all volumes (e.g. 100M,"
                    + " binary units); with no client I/O they run at full speed. 0 for no limit. A limit leaves the"
                    + " clients the CPU and the links while redundancy comes back more slowly. Default"
                    + " ${DEFAULT-VALUE}.")
    String rebuildRate;

    @Option(names = "--rebuild-chunk", paramLabel = "SIZE", defaultValue = "1M",
            description = "The bytes one rebuild read and write move (a power of two, 4K to 16M); four are in flight."
                    + " Smaller chunks hold a client's request behind a copy for less time, larger ones cost less CPU"
                    + " per byte. Default ${DEFAULT-VALUE}.")
    String rebuildChunk;

    @CommandLine.Mixin
    BridgeProcessOptions process;

    @CommandLine.Mixin
    OpsEndpointOptions.Serve ops;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        BridgeConfig bridgeConfig;
        try {
            if (configFile != null) {
                ConfigFile.apply(configFile, spec);
            }
            bridgeConfig = bridgeConfig();
            process.limits.validate(process.tls.settings());
            process.checkExposure("serve");
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        try {
            process.swapSafety.apply("serve");
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        } catch (IllegalStateException e) {
            spec.commandLine().getErr().println("serve: " + e.getMessage());
            return 1;
        }
        Telemetry telemetry = ops.telemetry();
        Bridge bridge;
        try {
            bridge = Bridge.start(telemetry == null ? bridgeConfig
                    : bridgeConfig.withMetrics(
                            new BridgeMeters(telemetry.registry())));
        } catch (IllegalStateException | IllegalArgumentException e) {
            spec.commandLine().getErr().println("serve: " + e.getMessage());
            return 1;
        }
        reloadOnHangup(bridge);
        return new BridgeProcess("serve", bridge, process, ops, telemetry, () -> {
        }).run(spec.commandLine().getErr());
    }

    /**
     * SIGHUP reads --config again and applies its memserver lines: memservers it lists that the bridge does not use
     * are added at once; one it no longer lists is named in the log with how to let it go (drain, then remove), never
     * dropped on the strength of an edit. Other options need a restart, and the log says so.
     */
    private void reloadOnHangup(Bridge bridge) {
        if (configFile == null) {
            return;
        }
        boolean ignored = Signals.handle("HUP",
                () -> Thread.ofVirtual().name("config-reload").start(() -> reload(bridge)));
        if (ignored) {
            org.slf4j.LoggerFactory.getLogger(ServeCommand.class).warn("SIGHUP is ignored by this process (started"
                    + " under nohup?): reloading {} by signal is off; add memservers with rbridge admin --bridge ..."
                    + " add-memserver", configFile);
        }
    }

    private void reload(Bridge bridge) {
        org.slf4j.Logger log = org.slf4j.LoggerFactory.getLogger(ServeCommand.class);
        ServeCommand again = new ServeCommand();
        CommandLine fresh = new CommandLine(again);
        try {
            fresh.parseArgs();
            ConfigFile.apply(configFile, fresh.getCommandSpec());
        } catch (IllegalArgumentException | CommandLine.ParameterException e) {
            log.warn("SIGHUP: cannot read {} ({}); nothing changed", configFile, e.getMessage());
            return;
        }
        java.util.Set<String> listed = new java.util.HashSet<>();
        for (String m : again.memservers) {
            InetSocketAddress a;
            try {
                a = Endpoints.parse(m, Defaults.MEMSERVER_PORT);
            } catch (IllegalArgumentException e) {
                log.warn("SIGHUP: {}: memserver '{}' ignored: {}", configFile, m, e.getMessage());
                continue;
            }
            listed.add(bridge.addMemserver(a, "--config " + configFile + " reloaded").label());
        }
        for (var l : bridge.memservers()) {
            if (!listed.contains(l.label()) && !memservers.contains(l.label())) {
                log.warn("SIGHUP: memserver {} is no longer in {}; the bridge keeps using it until it is drained"
                        + " (rbridge admin --bridge ... drain-memserver {}) or removed", l.label(), configFile,
                        l.label());
            }
        }
        int grown = 0;
        for (String text : again.volumes) {
            VolumeSpec want;
            try {
                want = VolumeSpecs.parse("volume", text, Sizes.parse(Defaults.VOLUME_SIZE), Defaults.REPLICAS);
            } catch (IllegalArgumentException e) {
                log.warn("SIGHUP: {}: volume '{}' ignored: {}", configFile, text, e.getMessage());
                continue;
            }
            var v = bridge.volume(want.name());
            if (v == null) {
                log.warn("SIGHUP: volume {} is new in {}: it is served from the next start", want.name(), configFile);
            } else if (want.size() > v.size()) {
                var refused = bridge.growVolume(want.name(), want.size(), true);
                if (refused == null) {
                    grown++;
                } else {
                    log.warn("SIGHUP: volume {} not grown: {}", want.name(), refused.why());
                }
            } else if (want.size() < v.size()) {
                log.warn("SIGHUP: volume {} is {} bytes, {} says {}: a volume never shrinks while it serves (a start"
                        + " with --allow-shrink discards what lies past the new end)", want.name(), v.size(),
                        configFile, want.size());
            }
        }
        log.info("SIGHUP: reloaded {}: {} memserver line(s) applied, {} volume(s) grown; other options take effect at"
                + " the next start", configFile, again.memservers.size(), grown);
    }

    BridgeConfig bridgeConfig() {
        if (memservers.isEmpty() && memserverNames.isEmpty()) {
            throw new IllegalArgumentException("give at least one --memserver HOST:PORT or --memserver-dns NAME (or use"
                    + " rbridge demo)");
        }
        if (volumes.isEmpty()) {
            throw new IllegalArgumentException("give at least one --volume, e.g. --volume disk,size=1G,replicas=2");
        }
        BridgeConfig.Builder b = BridgeConfig.builder()
                .transport(link.transport)
                .token(token.forServer())
                .operationTimeout(link.operationTimeout())
                .leaseTtl(seconds("--lease", lease))
                .startWait(Duration.ofMillis((long) (Math.max(0, startWait) * 1000)))
                .rebuildRate(Sizes.parse(rebuildRate))
                .rebuildChunk((int) Math.min(Integer.MAX_VALUE, Sizes.parse(rebuildChunk)))
                .tcpCongestion(process.tcpCongestion)
                .allowShrink(allowShrink)
                .hedgeReads(switch (hedgeReads.toLowerCase(java.util.Locale.ROOT)) {
                    case "on" -> true;
                    case "off" -> false;
                    default -> throw new IllegalArgumentException("--hedge-reads takes on or off, not '" + hedgeReads
                            + "'");
                })
                .spliceReads(switch (spliceReads.toLowerCase(java.util.Locale.ROOT)) {
                    case "on" -> true;
                    case "off" -> false;
                    default -> throw new IllegalArgumentException("--splice-reads takes on or off, not '"
                            + spliceReads + "'");
                });
        if (memserverTls != null) {
            b.memserverTls(X509Credentials.clientContext(memserverTls));
        }
        Integer lanes = link.checkedLanes();
        if (lanes != null) {
            b.lanes(lanes);
        }
        for (String m : memservers) {
            b.memserver(Endpoints.parse(m, Defaults.MEMSERVER_PORT));
        }
        for (String n : memserverNames) {
            InetSocketAddress a = Endpoints.parse(n, Defaults.MEMSERVER_PORT);
            b.memserverName(InetSocketAddress.createUnresolved(a.getHostString(), a.getPort()));
        }
        for (String v : volumes) {
            b.volume(VolumeSpecs.parse("volume", v, Sizes.parse(Defaults.VOLUME_SIZE), Defaults.REPLICAS));
        }
        return b.build();
    }

    static Duration seconds(String option, double s) {
        if (!(s > 0)) {
            throw new IllegalArgumentException(option + " must be positive");
        }
        return Duration.ofNanos((long) (s * 1e9));
    }

    /** serve's wording of the options it shares with the tools (picocli looks them up by option name). */
    public static final class Help extends ListResourceBundle {
        @Override
        protected Object[][] getContents() {
            return new Object[][]{
                    {"transport", "Remote-memory transport to the memservers: tcp or ucx. Default ${DEFAULT-VALUE}."},
                    {"timeout", "A memserver that leaves an operation unanswered this long is declared dead; requests"
                            + " that only it could serve fail with EIO. Default ${DEFAULT-VALUE}."},
                    {"lanes", "tcp transport: TCP connections to each memserver, each served by its own memserver"
                            + " thread. Small requests stay on the first; large transfers spread over all, so one"
                            + " memserver can use several cores for one bridge. 1 to " + ConnectParams.MAX_LANES
                            + ". Default: one per two CPUs of this host, at most 4."},
            };
        }
    }
}
