package dev.rbridge.bridge.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.PrintWriter;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * {@code rbridge admin}: operator actions on a memserver through its admin interface ({@code rbridge memserver
 * --admin}).
 */
@Command(name = "admin",
        mixinStandardHelpOptions = true,
        description = {"Operate a memserver: list clients, regions and counters; disconnect a client; revoke a region;",
                "drain (refuse new clients and grants, exit when the last client leaves); shut down.",
                "With --bridge: show a bridge's volumes, slab maps with replica states, memservers and rebuild progress."},
        footer = {"", "Memserver actions: clients | regions | leases | stats | disconnect CLIENT_ID | revoke REGION_ID | drain | shutdown",
                "Bridge actions (--bridge): volumes | slabs VOLUME | memservers | rebuild",
                "", "Examples:", "  rbridge admin --memserver 127.0.0.1:7472 --token-file /etc/rbridge/token clients",
                "  rbridge admin --bridge 127.0.0.1:7473 slabs disk"})
final class AdminCommand implements Callable<Integer> {
    @Option(names = "--memserver", paramLabel = "HOST:PORT", defaultValue = "127.0.0.1:7472",
            description = "The memserver's admin address (its --admin). Default ${DEFAULT-VALUE}.")
    String memserver;

    @Option(names = "--bridge", paramLabel = "HOST:PORT",
            description = "Ask a bridge (its --admin, usually 127.0.0.1:7473) instead of a memserver.")
    String bridge;

    @Option(names = "--token", paramLabel = "SECRET", description = "The memserver's token.")
    String token;

    @Option(names = "--token-file", paramLabel = "FILE", description = "Read the token from the first line of FILE.")
    Path tokenFile;

    @Option(names = "--json", description = "Print the memserver's JSON answer as is.")
    boolean json;

    @Option(names = "--log-level", paramLabel = "LEVEL", defaultValue = "warn", hidden = true)
    String logLevel;

    @Parameters(index = "0", paramLabel = "ACTION", description = "See below.")
    String action;

    @Parameters(index = "1", arity = "0..1", paramLabel = "ARG",
            description = "Client id (disconnect), region id (revoke) or volume name (slabs).")
    String id;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        String secret;
        String method;
        String path;
        try {
            secret = Endpoints.token(token, tokenFile);
            var address = bridge != null ? Endpoints.parse(bridge, 7473) : Endpoints.parse(memserver, 7472);
            String base = "http://" + address.getHostString() + ":" + address.getPort() + "/";
            if (bridge != null) {
                method = "GET";
                path = switch (action) {
                    case "volumes", "memservers", "rebuild" -> base + action;
                    case "slabs" -> {
                        if (id == null) {
                            throw new IllegalArgumentException("slabs needs a volume name");
                        }
                        yield base + "volumes/" + java.net.URLEncoder.encode(id, java.nio.charset.StandardCharsets.UTF_8)
                                .replace("+", "%20") + "/slabs";
                    }
                    default -> throw new IllegalArgumentException("unknown bridge action '" + action
                            + "' (volumes, slabs VOLUME, memservers, rebuild)");
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
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(path)).timeout(Duration.ofSeconds(10))
                .method(method, HttpRequest.BodyPublishers.noBody());
        if (secret != null) {
            request.header("Authorization", "Bearer " + secret);
        }
        HttpResponse<String> response;
        try (HttpClient client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build()) {
            response = client.send(request.build(), HttpResponse.BodyHandlers.ofString());
        } catch (java.io.IOException e) {
            spec.commandLine().getErr().println("admin: cannot reach the " + (bridge != null ? "bridge" : "memserver")
                    + "'s admin interface at " + (bridge != null ? bridge : memserver)
                    + ": " + (e.getMessage() == null ? e : e.getMessage()));
            return 1;
        }
        PrintWriter out = spec.commandLine().getOut();
        String body = response.body().trim();
        if (response.statusCode() >= 300) {
            Matcher m = Pattern.compile("\"error\":\"((?:[^\"\\\\]|\\\\.)*)\"").matcher(body);
            spec.commandLine().getErr().println("admin: " + (m.find() ? m.group(1) : body));
            return 1;
        }
        if (json || action.equals("stats") || action.equals("rebuild") || !body.startsWith("[")) {
            out.println(body);
        } else {
            table(out, body);
        }
        return 0;
    }

    /** Prints a JSON array of flat-ish objects as aligned columns (nested objects flattened). */
    private static void table(PrintWriter out, String array) {
        List<String> objects = splitObjects(array);
        if (objects.isEmpty()) {
            out.println("(none)");
            return;
        }
        Pattern field = Pattern.compile("\"(\\w+)\":(\"(?:[^\"\\\\]|\\\\.)*\"|-?\\d+|true|false)");
        List<List<String[]>> rows = objects.stream().map(o -> {
            Matcher m = field.matcher(o);
            List<String[]> cells = new java.util.ArrayList<>();
            while (m.find()) {
                String v = m.group(2);
                cells.add(new String[]{m.group(1), v.startsWith("\"") ? v.substring(1, v.length() - 1) : v});
            }
            return cells;
        }).toList();
        List<String[]> header = rows.get(0);
        int[] width = new int[header.size()];
        for (int i = 0; i < header.size(); i++) {
            width[i] = header.get(i)[0].length();
            for (List<String[]> r : rows) {
                if (i < r.size()) {
                    width[i] = Math.max(width[i], r.get(i)[1].length());
                }
            }
        }
        StringBuilder h = new StringBuilder();
        for (int i = 0; i < header.size(); i++) {
            h.append(String.format("%-" + (width[i] + 2) + "s", header.get(i)[0]));
        }
        out.println(h.toString().stripTrailing());
        for (List<String[]> r : rows) {
            StringBuilder line = new StringBuilder();
            for (int i = 0; i < r.size() && i < width.length; i++) {
                line.append(String.format("%-" + (width[i] + 2) + "s", r.get(i)[1]));
            }
            out.println(line.toString().stripTrailing());
        }
    }

    private static List<String> splitObjects(String array) {
        List<String> out = new java.util.ArrayList<>();
        int depth = 0;
        int start = -1;
        boolean inString = false;
        for (int i = 0; i < array.length(); i++) {
            char c = array.charAt(i);
            if (inString) {
                if (c == '\\') {
                    i++;
                } else if (c == '"') {
                    inString = false;
                }
                continue;
            }
            if (c == '"') {
                inString = true;
            } else if (c == '{') {
                if (depth++ == 0) {
                    start = i;
                }
            } else if (c == '}' && --depth == 0) {
                out.add(array.substring(start, i + 1));
            }
        }
        return out;
    }
}
