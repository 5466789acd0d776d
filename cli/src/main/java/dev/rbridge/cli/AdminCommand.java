package dev.rbridge.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.PrintWriter;
import java.net.InetSocketAddress;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.ListResourceBundle;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * {@code rbridge admin}: operator actions on a memserver through its admin interface ({@code rbridge memserver
 * --admin}), or on a bridge through its own. The command checks its options and turns the action into a request;
 * {@link AdminClient} sends it, {@link AdminTable} and {@link RebuildProgress} print the answer, {@link DrainWait}
 * waits after a drain.
 */
@Command(name = "admin",
        mixinStandardHelpOptions = true,
        resourceBundle = "dev.rbridge.cli.AdminCommand$Help",
        modelTransformer = AdminCommand.UnlistedLogLevel.class,
        description = {"Operate a memserver: list clients, regions and counters; disconnect a client; revoke a region;",
                "drain (refuse new clients and grants; bridges move their replicas elsewhere and leave; exit when the",
                "last client has gone); shut down.",
                "With --bridge: show a bridge's volumes, slab maps with replica states, memservers and rebuild progress;",
                "add a memserver while it serves (it takes new slabs and rebuilds at once), drain one (its replicas are",
                "copied elsewhere while I/O goes on, then the bridge lets it go), or remove one that holds no live replica;",
                "grow a volume while it serves.",
                "disconnect, revoke, drain and shutdown always need the memserver's token (--token-file), also on",
                "loopback; a memserver without a token refuses them. Reads need the token when the server has one."},
        footer = {"", "Memserver actions: clients | regions | leases | stats | disconnect CLIENT_ID | revoke REGION_ID"
                + " | drain [--wait] | shutdown",
                "Bridge actions (--bridge): volumes | slabs VOLUME | memservers | rebuild | add-memserver HOST:PORT"
                        + " | drain-memserver HOST:PORT | remove-memserver HOST:PORT | grow VOLUME SIZE (the last four"
                        + " change state: they need the token; grow: new NBD connections see the new size, and the"
                        + " configuration must say it too)",
                "", "Examples:", "  rbridge admin --memserver " + Defaults.MEMSERVER_ADMIN
                        + " --token-file /etc/rbridge/token clients",
                "  rbridge admin --memserver " + Defaults.MEMSERVER_ADMIN
                        + " --token-file /etc/rbridge/token drain --wait   (before stopping it)",
                "  rbridge admin --bridge " + Defaults.BRIDGE_ADMIN + " slabs disk"})
final class AdminCommand implements Callable<Integer> {
    @Option(names = "--memserver", paramLabel = "HOST:PORT", defaultValue = Defaults.MEMSERVER_ADMIN,
            description = "The memserver's admin address (its --admin). Default ${DEFAULT-VALUE}.")
    String memserver;

    @Option(names = "--bridge", paramLabel = "HOST:PORT",
            description = "Ask a bridge (its --admin, usually " + Defaults.BRIDGE_ADMIN + ") instead of a memserver.")
    String bridge;

    @CommandLine.Mixin
    TokenOptions token;

    @Option(names = "--json", description = "Print the server's JSON answer as is.")
    boolean json;

    @Option(names = "--watch", description = "With --bridge ... rebuild or volumes: print the progress every second,"
            + " with the rate and an estimate of the time left, until nothing is left to rebuild (rebuild) or no"
            + " volume is degraded or rebuilding (volumes).")
    boolean watch;

    @Option(names = "--wait", description = "With drain (of a memserver): wait until the memserver has exited, saying"
            + " how many clients it still waits for. Bridges move their replicas to other memservers and then leave;"
            + " a Kubernetes preStop hook runs this, so a rolling update never takes a slab's last live replica."
            + " Exits 1 when nothing moved for --give-up-after (the bridges cannot take the replicas).")
    boolean waitForExit;

    @Option(names = "--give-up-after", paramLabel = "SECONDS", defaultValue = "" + DrainWait.STALL_SECONDS,
            description = "With drain --wait: how long nothing may move (no client leaving, no bytes given back)"
                    + " before the command gives up with exit 1 (default: ${DEFAULT-VALUE}). Keep it below the"
                    + " time the supervisor allows the hook (Kubernetes: terminationGracePeriodSeconds).")
    int giveUpAfterSeconds;

    /** What the answers say about a bridge's rebuild, from one to the next. */
    private final RebuildProgress progress = new RebuildProgress();

    /** Accepted like every tool's, not listed: admin logs nothing worth choosing a level for. */
    @CommandLine.Mixin
    LogLevelOption.Tool logLevel;

    @Parameters(index = "0", paramLabel = "ACTION", description = "See below.")
    String action;

    @Parameters(index = "1", arity = "0..1", paramLabel = "ARG",
            description = "Client id (disconnect), region id (revoke), volume name (slabs) or HOST:PORT (add-memserver, remove-memserver).")
    String id;

    @Parameters(index = "2", arity = "0..1", paramLabel = "SIZE", description = "The new size (grow VOLUME SIZE;"
            + " K, M, G, T are binary).")
    String size;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    /** An admin request: its HTTP method and URL. */
    private record Request(String method, String url) {
    }

    @Override
    public Integer call() throws Exception {
        String secret;
        Request request;
        try {
            secret = token.forTool("admin");
            String base = baseUrl(secret != null);
            request = bridge != null ? bridgeRequest(base) : memserverRequest(base);
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        checkOptions();
        AdminClient client = new AdminClient(bridge != null ? "bridge" : "memserver",
                bridge != null ? bridge : memserver, secret, action);
        if (waitForExit) {
            int rc = once(client, request);
            String statsUrl = request.url().substring(0, request.url().length() - "drain".length()) + "stats";
            return rc != 0 ? rc
                    : new DrainWait(client, spec.commandLine().getOut(), spec.commandLine().getErr(),
                            giveUpAfterSeconds).await(statsUrl);
        }
        while (true) {
            int rc = once(client, request);
            if (!watch || rc != 0 || progress.done()) {
                return rc;
            }
            Thread.sleep(1000);
        }
    }

    /**
     * The admin interface's URL, ending in a slash. A token goes to loopback only: elsewhere it would cross the
     * network in clear.
     */
    private String baseUrl(boolean withToken) {
        InetSocketAddress address = bridge != null ? Endpoints.parse(bridge, Defaults.BRIDGE_ADMIN_PORT)
                : Endpoints.parse(memserver, Defaults.MEMSERVER_ADMIN_PORT);
        if (withToken && !Exposure.loopback(address.getHostString())) {
            throw new IllegalArgumentException("the token would cross the network in clear to "
                    + address.getHostString() + ": admin interfaces take it from loopback only; run rbridge admin"
                    + " on that host (ssh HOST rbridge admin ...) or tunnel the port (ssh -L "
                    + address.getPort() + ":127.0.0.1:" + address.getPort() + " HOST, then --"
                    + (bridge != null ? "bridge" : "memserver") + " 127.0.0.1:" + address.getPort() + ")");
        }
        String host = address.getHostString();
        return "http://" + (host.contains(":") ? "[" + host + "]" : host) + ":" + address.getPort() + "/";
    }

    /** A bridge action as a request; IllegalArgumentException when it is unknown or lacks its arguments. */
    private Request bridgeRequest(String base) {
        String method = action.endsWith("-memserver") || action.equals("grow") ? "POST" : "GET";
        return new Request(method, switch (action) {
            case "add-memserver", "remove-memserver", "drain-memserver" -> {
                if (id == null) {
                    throw new IllegalArgumentException(action + " needs HOST:PORT");
                }
                yield base + "memservers/" + URLEncoder.encode(id, StandardCharsets.UTF_8)
                        + "/" + action.substring(0, action.indexOf('-'));
            }
            case "volumes", "memservers", "rebuild" -> base + action;
            case "grow" -> {
                if (id == null || size == null) {
                    throw new IllegalArgumentException("grow needs a volume name and its new size");
                }
                yield base + "volumes/" + URLEncoder.encode(id, StandardCharsets.UTF_8).replace("+", "%20")
                        + "/grow/" + Sizes.parse(size);
            }
            case "slabs" -> {
                if (id == null) {
                    throw new IllegalArgumentException("slabs needs a volume name");
                }
                yield base + "volumes/" + URLEncoder.encode(id, StandardCharsets.UTF_8)
                        .replace("+", "%20") + "/slabs";
            }
            default -> throw new IllegalArgumentException("unknown bridge action '" + action
                    + "' (volumes, slabs VOLUME, memservers, rebuild, add-memserver HOST:PORT,"
                    + " drain-memserver HOST:PORT, remove-memserver HOST:PORT, grow VOLUME SIZE)");
        });
    }

    /** A memserver action as a request; IllegalArgumentException when it is unknown or lacks its id. */
    private Request memserverRequest(String base) {
        return switch (action) {
            case "clients", "regions", "leases", "stats" -> new Request("GET", base + action);
            case "disconnect", "revoke" -> new Request("POST", base
                    + (action.equals("disconnect") ? "clients/" : "regions/") + numericId() + "/" + action);
            case "drain", "shutdown" -> new Request("POST", base + action);
            default -> throw new IllegalArgumentException("unknown action '" + action
                    + "' (clients, regions, leases, stats, disconnect ID, revoke ID, drain, shutdown)");
        };
    }

    /** The client id (disconnect) or region id (revoke). */
    private long numericId() {
        if (id == null) {
            throw new IllegalArgumentException(action + " needs an id");
        }
        try {
            return Long.parseLong(id);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(action + " needs a numeric id: " + id);
        }
    }

    /** The options and arguments that do not go with the action. */
    private void checkOptions() {
        if (watch && !(bridge != null && (action.equals("rebuild") || action.equals("volumes")))) {
            throw new CommandLine.ParameterException(spec.commandLine(), "--watch applies to --bridge ... rebuild"
                    + " and --bridge ... volumes");
        }
        int takes = switch (action) {
            case "grow" -> 2;
            case "slabs", "add-memserver", "drain-memserver", "remove-memserver", "disconnect", "revoke" -> 1;
            default -> 0;
        };
        String extra = takes < 1 && id != null ? id : takes < 2 && size != null ? size : null;
        if (extra != null) {
            throw new CommandLine.ParameterException(spec.commandLine(), "unexpected argument '" + extra + "' for "
                    + action);
        }
        if (waitForExit && (bridge != null || !action.equals("drain"))) {
            throw new CommandLine.ParameterException(spec.commandLine(), "--wait applies to drain (of a memserver)");
        }
        if (giveUpAfterSeconds < 1) {
            throw new CommandLine.ParameterException(spec.commandLine(), "--give-up-after must be at least 1 second");
        }
    }

    /** One request and its answer printed; the exit code. */
    private int once(AdminClient client, Request request) throws InterruptedException {
        AdminClient.Answer answer;
        try {
            answer = client.send(request.method(), request.url());
        } catch (AdminClient.Failure e) {
            spec.commandLine().getErr().println(e.getMessage());
            return 1;
        }
        print(spec.commandLine().getOut(), answer);
        return 0;
    }

    /** An answer as --json, --watch and the action ask: as sent, as progress lines, or as a table. */
    private void print(PrintWriter out, AdminClient.Answer answer) {
        if (!json && bridge != null && action.equals("rebuild") && answer.json() instanceof Map<?, ?> m) {
            out.println(progress.rebuildLine(m));
            out.flush();
            return;
        }
        boolean watchVolumes = watch && action.equals("volumes") && answer.json() instanceof List<?>;
        if (watchVolumes && !json) {
            progress.printVolumes(out, (List<?>) answer.json());
            out.flush();
            return;
        }
        if (watchVolumes) {
            progress.sawVolumes((List<?>) answer.json());
        }
        if (json) {
            out.println(answer.body());
        } else {
            AdminTable.print(out, answer.json(), answer.body());
        }
    }

    /** Hides the --log-level that {@link LogLevelOption} declares for every tool from admin's help. */
    static final class UnlistedLogLevel implements CommandLine.IModelTransformer {
        @Override
        public CommandLine.Model.CommandSpec transform(CommandLine.Model.CommandSpec spec) {
            CommandLine.Model.OptionSpec listed = spec.findOption("--log-level");
            spec.remove(listed);
            spec.addOption(CommandLine.Model.OptionSpec.builder(listed).hidden(true).build());
            return spec;
        }
    }

    /** admin's own words for the shared options: the token is a memserver's, or with --bridge its memservers'. */
    public static final class Help extends ListResourceBundle {
        @Override
        protected Object[][] getContents() {
            return new Object[][]{
                    {"token", "The memserver's token (with --bridge: the token of the bridge's memservers; visible to"
                            + " other users in ps: prefer --token-file or " + Endpoints.TOKEN_ENV + ")."},
            };
        }
    }
}
