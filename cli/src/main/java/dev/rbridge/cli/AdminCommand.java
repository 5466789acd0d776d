package dev.rbridge.cli;

import dev.rbridge.ops.json.Json;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintWriter;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;

/**
 * {@code rbridge admin}: operator actions on a memserver through its admin interface ({@code rbridge memserver
 * --admin}).
 */
@Command(name = "admin",
        mixinStandardHelpOptions = true,
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
    /** The largest answer read: /regions of a memserver with 100,000 regions is some 15 MiB. */
    static final int MAX_ANSWER = 64 << 20;

    @Option(names = "--memserver", paramLabel = "HOST:PORT", defaultValue = Defaults.MEMSERVER_ADMIN,
            description = "The memserver's admin address (its --admin). Default ${DEFAULT-VALUE}.")
    String memserver;

    @Option(names = "--bridge", paramLabel = "HOST:PORT",
            description = "Ask a bridge (its --admin, usually " + Defaults.BRIDGE_ADMIN + ") instead of a memserver.")
    String bridge;

    @Option(names = "--token", paramLabel = "SECRET",
            description = "The memserver's token (with --bridge: the token of the bridge's memservers).")
    String token;

    @Option(names = "--token-file", paramLabel = "FILE", description = "Read the token from the first line of FILE.")
    Path tokenFile;

    @Option(names = "--json", description = "Print the server's JSON answer as is.")
    boolean json;

    @Option(names = "--watch", description = "With --bridge ... rebuild or volumes: print the progress every second,"
            + " with the rate and an estimate of the time left, until nothing is left to rebuild (rebuild) or no"
            + " volume is degraded or rebuilding (volumes).")
    boolean watch;

    /** volumes --watch: per volume, the healthy slabs last seen and when. */
    private final Map<String, long[]> lastHealthy = new LinkedHashMap<>();

    @Option(names = "--wait", description = "With drain (of a memserver): wait until the memserver has exited, saying"
            + " how many clients it still waits for. Bridges move their replicas to other memservers and then leave;"
            + " a Kubernetes preStop hook runs this, so a rolling update never takes a slab's last live replica."
            + " Exits 1 when nothing moved for --give-up-after (the bridges cannot take the replicas).")
    boolean waitForExit;

    @Option(names = "--give-up-after", paramLabel = "SECONDS", defaultValue = "" + STALL_SECONDS,
            description = "With drain --wait: how long nothing may move (no client leaving, no bytes given back)"
                    + " before the command gives up with exit 1 (default: ${DEFAULT-VALUE}). Keep it below the"
                    + " time the supervisor allows the hook (Kubernetes: terminationGracePeriodSeconds).")
    int giveUpAfterSeconds;

    /** --watch: the last total copied and when, for the rate; whether nothing is left. */
    private long lastCopied = -1;
    private long lastAt;
    private boolean watchDone;

    /** The bridge's /rebuild as one line: what is copied, how far, how fast and how long still; or why it waits. */
    String rebuildLine(Map<?, ?> m) {
        long queued = num(m.get("queued"));
        long degraded = num(m.get("degraded_slabs"));
        long total = num(m.get("copied_total"));
        long now = System.nanoTime();
        String rate = "";
        double bytesPerSecond = -1;
        if (lastCopied >= 0 && now > lastAt) {
            bytesPerSecond = (total - lastCopied) / ((now - lastAt) / 1e9);
            rate = ", " + Sizes.format((long) bytesPerSecond) + "/s";
        }
        lastCopied = total;
        lastAt = now;
        Object waiting = m.get("waiting");
        if (m.get("slab") != null) {
            long copied = num(m.get("copied"));
            long length = Math.max(1, num(m.get("length")));
            long left = (length - copied) + queued * length; // the queued slabs taken as large as this one
            String eta = bytesPerSecond > 0 ? ", about " + Math.round(left / bytesPerSecond) + " s left" : "";
            watchDone = false;
            return "rebuilding volume " + m.get("volume") + " slab " + m.get("slab") + " onto " + m.get("target")
                    + ": " + (100 * copied / length) + "% (" + Sizes.format(copied) + " of " + Sizes.format(length)
                    + ")" + rate + eta + "; " + queued + " more queued, " + degraded + " degraded slab(s)";
        }
        watchDone = queued == 0 && waiting == null;
        if (waiting != null) {
            return "waiting: " + waiting + "; " + degraded + " degraded slab(s), " + queued + " queued";
        }
        return queued == 0 ? "nothing to rebuild" + (degraded > 0 ? " (" + degraded + " degraded slab(s) waiting for"
                + " a memserver)" : "") : queued + " slab(s) queued";
    }

    /**
     * One volume of the bridge's /volumes as a line for volumes --watch: its state, how much of what it holds is
     * healthy, and while that grows how fast and how long until all is. Sets {@link #watchDone} false while any
     * volume is degraded or rebuilding.
     */
    String volumeLine(Map<?, ?> v) {
        String name = String.valueOf(v.get("name"));
        long allocated = num(v.get("allocated"));
        long healthy = num(v.get("healthy"));
        long slab = num(v.get("slab_size"));
        String state = String.valueOf(v.get("state"));
        long now = System.nanoTime();
        long[] last = lastHealthy.put(name, new long[] {healthy, now});
        String line = name + ": " + state + ", " + healthy + " of " + allocated + " allocated slab(s) healthy"
                + (allocated > 0 ? " (" + (100 * healthy / allocated) + "%)" : "");
        if (state.equals("degraded") || state.equals("rebuilding")) {
            watchDone = false;
            line += ", " + num(v.get("degraded")) + " degraded, " + num(v.get("rebuilding")) + " rebuilding";
            if (last != null && now > last[1] && healthy > last[0]) {
                double perSecond = (healthy - last[0]) / ((now - last[1]) / 1e9);
                line += ", " + Sizes.format((long) (perSecond * slab)) + "/s, about "
                        + Math.round((allocated - healthy) / perSecond) + " s left";
            }
        } else if (num(v.get("lost")) > 0) {
            line += ", " + num(v.get("lost")) + " lost (no live replica: see admin slabs " + name + ")";
        }
        return line;
    }

    private static long num(Object o) {
        return o instanceof Number n ? n.longValue() : 0;
    }

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

    @Override
    public Integer call() throws Exception {
        String secret;
        String method;
        String path;
        try {
            Endpoints.warnToolIfOnCommandLine("admin", token);
            secret = Endpoints.token(token, tokenFile);
            var address = bridge != null ? Endpoints.parse(bridge, Defaults.BRIDGE_ADMIN_PORT)
                    : Endpoints.parse(memserver, Defaults.MEMSERVER_ADMIN_PORT);
            if (secret != null && !Exposure.loopback(address.getHostString())) {
                throw new IllegalArgumentException("the token would cross the network in clear to "
                        + address.getHostString() + ": admin interfaces take it from loopback only; run rbridge admin"
                        + " on that host (ssh HOST rbridge admin ...) or tunnel the port (ssh -L "
                        + address.getPort() + ":127.0.0.1:" + address.getPort() + " HOST, then --"
                        + (bridge != null ? "bridge" : "memserver") + " 127.0.0.1:" + address.getPort() + ")");
            }
            String host = address.getHostString();
            String base = "http://" + (host.contains(":") ? "[" + host + "]" : host) + ":" + address.getPort() + "/";
            if (bridge != null) {
                method = action.endsWith("-memserver") || action.equals("grow") ? "POST" : "GET";
                path = switch (action) {
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
                };
            } else switch (action) {
                case "clients", "regions", "leases", "stats" -> {
                    method = "GET";
                    path = base + action;
                }
                case "disconnect", "revoke" -> {
                    if (id == null) {
                        throw new IllegalArgumentException(action + " needs an id");
                    }
                    method = "POST";
                    long n;
                    try {
                        n = Long.parseLong(id);
                    } catch (NumberFormatException e) {
                        throw new IllegalArgumentException(action + " needs a numeric id: " + id);
                    }
                    path = base + (action.equals("disconnect") ? "clients/" : "regions/") + n + "/" + action;
                }
                case "drain", "shutdown" -> {
                    method = "POST";
                    path = base + action;
                }
                default -> throw new IllegalArgumentException("unknown action '" + action
                        + "' (clients, regions, leases, stats, disconnect ID, revoke ID, drain, shutdown)");
            }
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
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
        if (waitForExit) {
            int rc = once(method, path, secret);
            return rc != 0 ? rc : awaitExit(path.substring(0, path.length() - "drain".length()) + "stats", secret);
        }
        while (true) {
            int rc = once(method, path, secret);
            if (!watch || rc != 0 || watchDone) {
                return rc;
            }
            Thread.sleep(1000);
        }
    }

    /** How long drain --wait waits with nothing moving (clients, granted bytes) before it gives up, by default. */
    static final int STALL_SECONDS = 120;

    /**
     * After a drain: polls the memserver's stats every second until its admin interface stops answering (it exits
     * once its last client has gone) or answers for a new instance (a supervisor restarted it), printing the clients it
     * still waits for whenever that changes. Gives up (exit 1, saying why) when nothing moved for --give-up-after
     * ({@link #STALL_SECONDS} by default): the bridges are not taking its replicas elsewhere.
     */
    private int awaitExit(String statsPath, String secret) throws InterruptedException {
        PrintWriter out = spec.commandLine().getOut();
        long said = -1;
        long lastGranted = -1;
        long lastChange = System.nanoTime();
        try (HttpClient client = HttpClient.newBuilder()
                .connectTimeout(Duration.ofSeconds(Defaults.ADMIN_CONNECT_TIMEOUT_SECONDS)).build()) {
            while (true) {
                HttpRequest.Builder request = request("GET", statsPath, secret);
                long clients;
                long granted;
                try {
                    HttpResponse<String> r = client.send(request.build(), HttpResponse.BodyHandlers.ofString());
                    if (!(r.statusCode() == 200 && Json.parse(r.body()) instanceof Map<?, ?> m)) {
                        spec.commandLine().getErr().println("admin: the memserver's stats: "
                                + errorText(r.body()));
                        return 1;
                    }
                    if (!Boolean.TRUE.equals(m.get("draining"))) {
                        out.println("memserver exited: drained (a new instance answers there now)");
                        out.flush();
                        return 0;
                    }
                    clients = num(m.get("clients"));
                    granted = num(m.get("granted_bytes"));
                } catch (java.net.ConnectException e) {
                    out.println("memserver exited: drained");
                    out.flush();
                    return 0;
                } catch (IOException | IllegalArgumentException e) {
                    // it may be closing its listener just now: the next poll tells, within the same bound
                    if (System.nanoTime() - lastChange > TimeUnit.SECONDS.toNanos(giveUpAfterSeconds)) {
                        spec.commandLine().getErr().println("admin: the memserver's stats did not answer for "
                                + giveUpAfterSeconds + " s: " + (e.getMessage() == null ? e : e.getMessage()));
                        return 1;
                    }
                    Thread.sleep(1000);
                    continue;
                }
                long now = System.nanoTime();
                if (clients != said || granted != lastGranted) {
                    lastChange = now;
                    lastGranted = granted;
                }
                if (clients != said) {
                    said = clients;
                    out.println("draining: waiting for " + clients + " client(s) to leave (" + Sizes.format(granted)
                            + " granted); bridges move their replicas to other memservers first");
                    out.flush();
                } else if (now - lastChange > TimeUnit.SECONDS.toNanos(giveUpAfterSeconds)) {
                    spec.commandLine().getErr().println("admin: nothing moved for " + giveUpAfterSeconds + " s: "
                            + clients + " client(s) stay with " + Sizes.format(granted) + " granted; the bridges"
                            + " cannot take its replicas elsewhere (their logs say why: too few memservers or no"
                            + " room); it stays draining");
                    return 1;
                }
                Thread.sleep(1000);
            }
        }
    }

    /** A request to an admin interface: the answer timeout, and the token as a bearer token when there is one. */
    private static HttpRequest.Builder request(String method, String path, String secret) {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(path))
                .timeout(Duration.ofSeconds(Defaults.ADMIN_ANSWER_TIMEOUT_SECONDS))
                .method(method, HttpRequest.BodyPublishers.noBody());
        if (secret != null) {
            request.header("Authorization", "Bearer " + secret);
        }
        return request;
    }

    /** One request and its answer printed; the exit code. */
    private int once(String method, String path, String secret) throws InterruptedException {
        HttpRequest.Builder request = request(method, path, secret);
        String target = bridge != null ? "bridge" : "memserver";
        int status;
        String body;
        try (HttpClient client = HttpClient.newBuilder()
                .connectTimeout(Duration.ofSeconds(Defaults.ADMIN_CONNECT_TIMEOUT_SECONDS)).build()) {
            HttpResponse<InputStream> response = client.send(request.build(), HttpResponse.BodyHandlers.ofInputStream());
            status = response.statusCode();
            try (InputStream in = response.body()) {
                byte[] bytes = in.readNBytes(MAX_ANSWER + 1);
                if (bytes.length > MAX_ANSWER) {
                    spec.commandLine().getErr().println("admin: the " + target + "'s answer is larger than "
                            + (MAX_ANSWER >> 20) + " MiB; not read");
                    return 1;
                }
                body = new String(bytes, StandardCharsets.UTF_8).trim();
            }
        } catch (IOException e) {
            String why = e.getMessage() == null ? e.toString() : e.getMessage();
            if (e instanceof java.net.ConnectException && e.getMessage() == null) {
                why = "nothing answers there (connection refused)";
            } else if (!(e instanceof java.net.ConnectException) && !(e instanceof java.net.http.HttpConnectTimeoutException)
                    && !(e instanceof java.net.http.HttpTimeoutException)) {
                why = "it does not answer HTTP (" + why + "); is that the admin port? (a memserver's admin is "
                        + Defaults.MEMSERVER_ADMIN + ", a bridge's " + Defaults.LOOPBACK + ":"
                        + Defaults.BRIDGE_ADMIN_PORT + " unless --admin moved them)";
            }
            spec.commandLine().getErr().println("admin: cannot reach the " + target + "'s admin interface at "
                    + (bridge != null ? bridge : memserver) + ": " + why);
            return 1;
        }
        PrintWriter out = spec.commandLine().getOut();
        if (status >= 300) {
            spec.commandLine().getErr().println(failure(status, method, secret != null, errorText(body)));
            return 1;
        }
        Object answer;
        try {
            answer = Json.parse(body);
        } catch (IllegalArgumentException e) {
            spec.commandLine().getErr().println("admin: the " + target + " answered something that is not JSON: "
                    + e.getMessage());
            return 1;
        }
        if (!json && bridge != null && action.equals("rebuild") && answer instanceof Map<?, ?> m) {
            out.println(rebuildLine(m));
            out.flush();
            return 0;
        }
        if (!json && watch && action.equals("volumes") && answer instanceof List<?> volumes) {
            watchDone = true;
            for (Object v : volumes) {
                if (v instanceof Map<?, ?> m) {
                    out.println(volumeLine(m));
                }
            }
            if (volumes.size() > 1) {
                out.println();
            }
            out.flush();
            return 0;
        }
        if (watch && action.equals("volumes") && answer instanceof List<?> volumes) {
            watchDone = volumes.stream().noneMatch(v -> v instanceof Map<?, ?> m
                    && ("degraded".equals(m.get("state")) || "rebuilding".equals(m.get("state"))));
        }
        if (json) {
            out.println(body);
        } else if (answer instanceof List<?> rows) {
            table(out, rows);
        } else if (answer instanceof Map<?, ?> fields) {
            List<Map<String, Object>> pairs = new ArrayList<>();
            Map<String, String> flat = new LinkedHashMap<>();
            flatten(fields, flat);
            flat.forEach((k, v) -> {
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("name", k);
                row.put("value", human(k, v));
                pairs.add(row);
            });
            table(out, pairs);
        } else {
            out.println(body);
        }
        return 0;
    }

    /**
     * The one line printed when the server says no: for an operation that changes state and was refused (401, 403,
     * 405), "admin: ACTION refused: WHY"; with a hint when the token is missing or wrong.
     */
    private String failure(int status, String method, boolean gaveToken, String why) {
        boolean refused = status == 401 || status == 403 || status == 405;
        String hint = status != 401 ? "" : gaveToken ? " (the token given is not the server's)"
                : " (give --token-file FILE with the server's token)";
        return (refused && method.equals("POST") ? "admin: " + action + " refused: " : "admin: ") + why + hint;
    }

    /** The server's own sentence from {@code {"error": ...}}, or the start of whatever else it sent. */
    private static String errorText(String body) {
        try {
            if (Json.parse(body) instanceof Map<?, ?> m && m.get("error") instanceof String error) {
                return error;
            }
        } catch (IllegalArgumentException e) {
            // not our JSON: show the text itself, below
        }
        String oneLine = body.replaceAll("\\s+", " ");
        return oneLine.length() > 200 ? oneLine.substring(0, 200) + "..." : oneLine;
    }

    /** Prints a JSON array of objects as aligned columns; nested objects' fields become columns of their own. */
    private static void table(PrintWriter out, List<?> array) {
        if (array.isEmpty()) {
            out.println("(none)");
            return;
        }
        List<Map<String, String>> rows = new ArrayList<>();
        for (Object o : array) {
            Map<String, String> cells = new LinkedHashMap<>();
            flatten(o, cells);
            cells.replaceAll(AdminCommand::human);
            rows.add(cells);
        }
        List<String> columns = new ArrayList<>();
        for (Map<String, String> r : rows) {
            for (String k : r.keySet()) {
                if (!columns.contains(k)) {
                    columns.add(k);
                }
            }
        }
        int[] width = new int[columns.size()];
        for (int i = 0; i < columns.size(); i++) {
            width[i] = columns.get(i).length();
            for (Map<String, String> r : rows) {
                width[i] = Math.max(width[i], r.getOrDefault(columns.get(i), "").length());
            }
        }
        StringBuilder h = new StringBuilder();
        for (int i = 0; i < columns.size(); i++) {
            h.append(String.format("%-" + (width[i] + 2) + "s", header(columns.get(i))));
        }
        out.println(h.toString().stripTrailing());
        for (Map<String, String> r : rows) {
            StringBuilder line = new StringBuilder();
            for (int i = 0; i < columns.size(); i++) {
                line.append(String.format("%-" + (width[i] + 2) + "s", printable(r.getOrDefault(columns.get(i), ""))));
            }
            out.println(line.toString().stripTrailing());
        }
    }

    /** One header style for every table: the JSON key in capitals, words apart ("SLAB SIZE"). */
    static String header(String key) {
        return key.toUpperCase(java.util.Locale.ROOT).replace('_', ' ');
    }

    /** Byte counts as sizes (64MiB), the rest as sent; keys say which are bytes. --json keeps raw numbers. */
    static String human(String key, String value) {
        boolean bytes = key.equals("size") || key.equals("slab_size") || key.equals("capacity") || key.equals("free")
                || key.equals("length") || key.equals("copied") || key.equals("copied_total") || key.equals("start")
                || key.endsWith("_bytes") || key.equals("bytes");
        if (!bytes || value == null || value.isEmpty()) {
            return value;
        }
        try {
            return Sizes.format((long) Double.parseDouble(value));
        } catch (NumberFormatException e) {
            return value;
        }
    }

    private static void flatten(Object value, Map<String, String> cells) {
        if (value instanceof Map<?, ?> m) {
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (e.getValue() instanceof Map<?, ?> || e.getValue() instanceof List<?>) {
                    flatten(e.getValue(), cells);
                } else {
                    cells.put(String.valueOf(e.getKey()), e.getValue() == null ? "" : String.valueOf(e.getValue()));
                }
            }
        }
    }

    /** A value from the server on the operator's terminal: no control characters (escape sequences). */
    private static String printable(String s) {
        return s.codePoints().map(c -> Character.isISOControl(c) ? '?' : c)
                .collect(StringBuilder::new, StringBuilder::appendCodePoint, StringBuilder::append).toString();
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
}
