package dev.rbridge.cli;

import dev.rbridge.memserver.HugePages;
import dev.rbridge.memserver.NumaPlacement;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.memserver.MemserverConfig;
import dev.rbridge.ops.admin.MemserverAdminHttpServer;
import dev.rbridge.ops.http.OpsHttpMetrics;
import dev.rbridge.ops.metrics.MemserverMeters;
import dev.rbridge.ops.metrics.MetricsHttpServer;
import dev.rbridge.ops.metrics.OpsHttpMeters;
import dev.rbridge.ops.metrics.Readiness;
import dev.rbridge.ops.metrics.Telemetry;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ConnectionLimits;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ListResourceBundle;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;

/** {@code rbridge memserver}: lend this machine's RAM to bridges. */
@Command(name = "memserver",
        mixinStandardHelpOptions = true,
        resourceBundle = "dev.rbridge.cli.MemserverCommand$Help",
        description = {
                "Lend RAM to bridges as regions over a remote-memory transport.",
                "Memory is reserved per region but touched only when written; grants never exceed --capacity.",
                "Clients must present the token; refused attempts are logged."},
        footer = {"", "Example:", "  rbridge memserver --listen 0.0.0.0:" + Defaults.MEMSERVER_PORT
                + " --capacity 64G --token-file /etc/rbridge/token"})
final class MemserverCommand implements Callable<Integer> {
    private static final Logger log = LoggerFactory.getLogger(MemserverCommand.class);

    @Option(names = "--config", paramLabel = "FILE", description = "Read options from FILE first: one 'option = value'"
            + " per line, without the leading dashes; '#' starts a comment; the command line adds to it.")
    Path configFile;

    @Option(names = "--listen", paramLabel = "HOST:PORT", defaultValue = Defaults.MEMSERVER_LISTEN,
            description = "Address to serve on. Default ${DEFAULT-VALUE}.")
    String listen;

    @Option(names = "--capacity", paramLabel = "SIZE",
            description = "Most memory granted at once (K, M, G, T are binary), e.g. 64G.")
    String capacity;

    @CommandLine.Mixin
    TokenOptions token;

    @Option(names = "--tls-certificates", paramLabel = "DIR",
            description = "Speak TLS to every client (tcp: the whole connection; ucx: the control connection, RDMA"
                    + " data cannot be encrypted); clients in clear are refused. DIR holds server-cert.pem and"
                    + " server-key.pem (nbdkit's and qemu's names), and ca-cert.pem for --tls-verify-peer.")
    Path tlsCertificates;

    @Option(names = "--tls-verify-peer", description = "With --tls-certificates: admit only clients presenting a"
            + " certificate from ca-cert.pem's CA (mutual TLS; it stands in for a token, and with one both are needed).")
    boolean tlsVerifyPeer;

    @Option(names = "--insecure", description = "Lend memory without a token on an address other hosts reach: anyone"
            + " there can then read and write every region. Without it, a --listen address that is not loopback"
            + " needs a token or --tls-verify-peer.")
    boolean insecure;

    @CommandLine.Mixin
    OpsEndpointOptions.Memserver ops;

    @Option(names = "--huge-pages", paramLabel = "auto|on|off", arity = "0..1", fallbackValue = "on",
            defaultValue = "auto",
            description = "Back regions with 2 MiB huge pages from the kernel's pool (vm.nr_hugepages); with on, grants "
                    + "that the pool cannot cover are refused with that reason (--huge-pages alone means on). auto: on "
                    + "where regions are registered with an RDMA NIC (--transport ucx on an RDMA device) and the pool "
                    + "has room for --capacity, else off; the log says which and why. Default ${DEFAULT-VALUE}.")
    String hugePages;

    @Option(names = "--numa-node", paramLabel = "auto|off|N", defaultValue = "auto",
            description = "The NUMA node region memory comes from (preferred: once it is full, pages come from the "
                    + "others). auto: on a host with more than one node, the node of the NIC that holds the --listen "
                    + "address, so transfers do not cross between sockets; none where the memserver listens on every "
                    + "address or the NIC reports no node. The log says which and why. Default ${DEFAULT-VALUE}.")
    String numaNode;

    @Option(names = "--mlock",
            description = "Lock region memory so it is never swapped (as pages are first touched); needs a memlock "
                    + "limit that covers the capacity (ulimit -l, LimitMEMLOCK=infinity).")
    boolean mlock;

    @Option(names = "--transport", paramLabel = "NAME", defaultValue = Defaults.TRANSPORT,
            description = "Remote-memory transport: tcp, ucx or local. Default ${DEFAULT-VALUE}.")
    String transport;

    @Option(names = "--tcp-congestion", paramLabel = "NAME", defaultValue = ConnectParams.TCP_CONGESTION_DEFAULT,
            description = "tcp: TCP congestion control of client connections"
                    + MemserverClientOptions.TCP_CONGESTION_HELP)
    String tcpCongestion;

    @Option(names = "--max-connections", paramLabel = "N", defaultValue = "" + ConnectionLimits.MAX_CONNECTIONS_DEFAULT,
            description = "Most client connections held at once, authenticated or not; more are refused, told why. "
                    + "Each authenticated one costs a thread and about 0.6 MiB of direct memory. Default "
                    + "${DEFAULT-VALUE}.")
    int maxConnections;

    @Option(names = "--max-connections-per-peer", paramLabel = "N",
            defaultValue = "" + ConnectionLimits.MAX_PER_PEER_DEFAULT,
            description = "Of them, most from one address, so one host cannot take every place; a newcomer from an "
                    + "address at its limit takes the place of its oldest that has not authenticated, if any. "
                    + "Default ${DEFAULT-VALUE}.")
    int maxConnectionsPerPeer;

    @Option(names = "--max-unauthenticated", paramLabel = "N",
            defaultValue = "" + ConnectionLimits.MAX_UNAUTHENTICATED_DEFAULT,
            description = "Of them, most that have not presented the token yet (at most "
                    + ConnectionLimits.MAX_UNAUTHENTICATED_PER_PEER_DEFAULT + " per address); each costs a thread and "
                    + "12 KiB until it authenticates or 10 s pass. A newcomer from an address holding its share "
                    + "takes the place of that address's oldest; when all are full, the oldest of the address "
                    + "holding the most makes way for a newcomer from another address. Default ${DEFAULT-VALUE}.")
    int maxUnauthenticated;

    @Option(names = "--max-regions", paramLabel = "N", defaultValue = "" + MemserverConfig.MAX_REGIONS_DEFAULT,
            description = "Most regions granted at once; beyond it grants fail with NO_CAPACITY. Each region is one "
                    + "memory mapping (keep it well under vm.max_map_count); at most "
                    + MemserverConfig.MAX_REGIONS_LIMIT + ". Default ${DEFAULT-VALUE}.")
    int maxRegions;

    @CommandLine.Mixin
    LogLevelOption.Server logLevel;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        MemserverConfig config = config();
        Memserver server;
        try {
            server = Memserver.start(config);
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        // made first so the admin server's refusals are counted in it too
        Telemetry telemetry = ops.telemetry();
        MemserverAdminHttpServer adminServer;
        try {
            adminServer = startAdmin(server, config, telemetry);
        } catch (IOException | IllegalArgumentException e) {
            server.close();
            spec.commandLine().getErr().println("memserver: " + e.getMessage() + " (use --admin HOST:PORT or none)");
            return 1;
        }
        MetricsHttpServer metricsServer = null;
        if (telemetry != null) {
            MemserverMeters.bind(telemetry.registry(), server);
            telemetry.readinessCheck(() -> Readiness.memserver(server));
            try {
                metricsServer = ops.startMetrics(telemetry);
            } catch (IOException | IllegalArgumentException e) {
                if (adminServer != null) {
                    adminServer.close();
                }
                server.close();
                spec.commandLine().getErr().println("memserver: " + e.getMessage());
                return 1;
            }
        }
        CountDownLatch stopped = stopOnSigterm(server, adminServer, metricsServer);
        GracefulStop.onTerm(); // before the line that says it serves: whoever reads it may stop it at once
        announce(config, server, adminServer, metricsServer);
        stopped.await();
        return 0;
    }

    /**
     * The memserver's configuration from the options (and --config), with the huge page and NUMA choices logged;
     * ParameterException when they do not make one.
     */
    private MemserverConfig config() {
        MemserverConfig config;
        HugePages.Choice huge;
        NumaPlacement.Choice numa;
        try {
            if (configFile != null) {
                ConfigFile.apply(configFile, spec);
            }
            if (capacity == null) {
                throw new IllegalArgumentException("give --capacity SIZE (how much memory to lend, e.g. 64G), on the"
                        + " command line or as 'capacity = SIZE' in --config");
            }
            long capacityBytes = Sizes.parse(capacity);
            huge = HugePages.choose(HugePages.Mode.parse(hugePages), transport, capacityBytes);
            java.net.InetSocketAddress address = Endpoints.parse(listen, Defaults.MEMSERVER_PORT);
            numa = NumaPlacement.choose(NumaPlacement.Mode.parse(numaNode), address.getAddress());
            String secret = token.forServer();
            if (tlsVerifyPeer && tlsCertificates == null) {
                throw new IllegalArgumentException("--tls-verify-peer needs --tls-certificates DIR");
            }
            if (secret == null && !tlsVerifyPeer && !insecure && !Exposure.loopback(address.getHostString())) {
                throw new IllegalArgumentException("memserver would lend memory on " + listen + ", which other hosts"
                        + " reach, to anyone who connects: add --token-file FILE (openssl rand -hex 32 > FILE) or"
                        + " --tls-certificates DIR --tls-verify-peer, or --insecure to lend it open on purpose");
            }
            config = new MemserverConfig(address, capacityBytes,
                    secret, transport, huge.use(), mlock, tcpCongestion,
                    ConnectionLimits.of(maxConnections, maxConnectionsPerPeer, maxUnauthenticated), maxRegions)
                    .withTls(tlsCertificates, tlsVerifyPeer).withNumaNode(numa.node());
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        log.info("{}", huge.why());
        log.info("{}", numa.why());
        return config;
    }

    /** The admin interface, or null with {@code --admin none}; its refusals and connections are counted. */
    private MemserverAdminHttpServer startAdmin(Memserver server, MemserverConfig config, Telemetry telemetry)
            throws IOException {
        if (ops.admin.equals(Defaults.OFF)) {
            return null;
        }
        OpsHttpMeters adminMeters = telemetry == null ? null : new OpsHttpMeters(telemetry.registry(), "admin");
        MemserverAdminHttpServer adminServer = new MemserverAdminHttpServer(ops.adminAddress(), server, config.token(),
                () -> System.exit(0), adminMeters == null ? OpsHttpMetrics.NONE : adminMeters);
        if (adminMeters != null) {
            adminMeters.bindConnections(adminServer::openConnections);
        }
        return adminServer;
    }

    /** On SIGTERM: the ops endpoints close, then the memserver; the latch opens once all are closed. */
    private static CountDownLatch stopOnSigterm(Memserver server, MemserverAdminHttpServer adminServer,
            MetricsHttpServer metricsServer) {
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            SystemdNotify.stopping();
            if (adminServer != null) {
                adminServer.close();
            }
            if (metricsServer != null) {
                metricsServer.close();
            }
            server.close();
            stopped.countDown();
        }, "shutdown"));
        return stopped;
    }

    /** Where it serves, on stdout (scripts and tests wait for this line), and READY=1 to systemd. */
    private static void announce(MemserverConfig config, Memserver server, MemserverAdminHttpServer adminServer,
            MetricsHttpServer metricsServer) {
        System.out.println("rbridge memserver: lending " + Sizes.format(config.capacityBytes()) + " at "
                + server.address().getHostString() + ":" + server.address().getPort()
                + (adminServer == null ? ""
                        : " admin " + adminServer.address().getHostString() + ":"
                                + adminServer.address().getPort())
                + MetricsEndpoint.describe(metricsServer));
        System.out.flush();
        SystemdNotify.ready("lending " + Sizes.format(config.capacityBytes()));
    }

    /** memserver's wording of its --admin and its token options (picocli looks them up by option name). */
    public static final class Help extends ListResourceBundle {
        @Override
        protected Object[][] getContents() {
            return new Object[][]{
                    {"token", "Shared secret clients must prove they know (visible to other users in ps: prefer"
                            + " --token-file or " + Endpoints.TOKEN_ENV + ")."},
                    {"token-file", "Read the secret from the first line of FILE (make it random: openssl rand -hex 32"
                            + " > FILE). Else " + Endpoints.TOKEN_ENV + " is used when set."},
                    {"admin", "Operator interface (JSON over HTTP) for rbridge admin; 'none' turns it off. Reads need"
                            + " the token when one is set; drain, shutdown, revoke and disconnect always need it (POST"
                            + " only) and are off without one. Requests from web pages (an Origin header) and, on"
                            + " loopback, requests for a Host that is not a loopback name are refused."
                            + " Default ${DEFAULT-VALUE}."},
            };
        }
    }
}
