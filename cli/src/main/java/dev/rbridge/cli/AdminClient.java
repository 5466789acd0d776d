package dev.rbridge.cli;

import dev.rbridge.ops.json.Json;

import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;

/**
 * The HTTP side of rbridge admin: requests to a memserver's or a bridge's admin interface (the token as a bearer
 * token, bounded waits), their answers read up to {@link #MAX_ANSWER}, and every way that fails as the one line admin
 * prints.
 */
final class AdminClient {
    /** The largest answer read: /regions of a memserver with 100,000 regions is some 15 MiB. */
    static final int MAX_ANSWER = 64 << 20;

    private final String target;
    private final String address;
    private final String secret;
    private final String action;

    /**
     * @param target  what answers, for the messages: {@code bridge} or {@code memserver}
     * @param address its admin address as the operator gave it, for the messages
     * @param secret  the token, or null
     * @param action  the admin action asked for, for the message when the server refuses it
     */
    AdminClient(String target, String address, String secret, String action) {
        this.target = target;
        this.address = address;
        this.secret = secret;
        this.action = action;
    }

    /** An answer that came: its text as sent (trimmed), and that text parsed as JSON. */
    record Answer(String body, Object json) {
    }

    /** Why a request brought no answer to show, as the one line admin prints. */
    static final class Failure extends Exception {
        Failure(String line, Throwable cause) {
            super(line, cause);
        }
    }

    /** One request on a client of its own, its answer read and parsed. */
    Answer send(String method, String url) throws Failure, InterruptedException {
        HttpRequest.Builder request = request(method, url);
        int status;
        String body;
        try (HttpClient client = newHttpClient()) {
            HttpResponse<InputStream> response = client.send(request.build(),
                    HttpResponse.BodyHandlers.ofInputStream());
            status = response.statusCode();
            body = read(response);
        } catch (IOException e) {
            throw new Failure("admin: cannot reach the " + target + "'s admin interface at " + address + ": "
                    + unreachable(e), e);
        }
        if (status >= 300) {
            throw new Failure(refusal(status, method, errorText(body)), null);
        }
        try {
            return new Answer(body, Json.parse(body));
        } catch (IllegalArgumentException e) {
            throw new Failure("admin: the " + target + " answered something that is not JSON: " + e.getMessage(), e);
        }
    }

    /** A GET on a client held open across requests (drain --wait's polls), the answer as text. */
    HttpResponse<String> get(HttpClient client, String url) throws IOException, InterruptedException {
        return client.send(request("GET", url).build(), HttpResponse.BodyHandlers.ofString());
    }

    /** A client that gives up connecting after the admin connect timeout. */
    static HttpClient newHttpClient() {
        return HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(Defaults.ADMIN_CONNECT_TIMEOUT_SECONDS))
                .build();
    }

    /** A request to an admin interface: the answer timeout, and the token as a bearer token when there is one. */
    private HttpRequest.Builder request(String method, String url) {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(url))
                .timeout(Duration.ofSeconds(Defaults.ADMIN_ANSWER_TIMEOUT_SECONDS))
                .method(method, HttpRequest.BodyPublishers.noBody());
        if (secret != null) {
            request.header("Authorization", "Bearer " + secret);
        }
        return request;
    }

    /** The answer's text, trimmed; a Failure when it is larger than {@link #MAX_ANSWER} (not read further). */
    private String read(HttpResponse<InputStream> response) throws IOException, Failure {
        try (InputStream in = response.body()) {
            byte[] bytes = in.readNBytes(MAX_ANSWER + 1);
            if (bytes.length > MAX_ANSWER) {
                throw new Failure("admin: the " + target + "'s answer is larger than " + (MAX_ANSWER >> 20)
                        + " MiB; not read", null);
            }
            return new String(bytes, StandardCharsets.UTF_8).trim();
        }
    }

    /** Why nothing answered, in words; for what is not even HTTP, where the admin ports are. */
    private static String unreachable(IOException e) {
        String why = e.getMessage() == null ? e.toString() : e.getMessage();
        if (e instanceof ConnectException && e.getMessage() == null) {
            return "nothing answers there (connection refused)";
        }
        if (!(e instanceof ConnectException) && !(e instanceof HttpConnectTimeoutException)
                && !(e instanceof HttpTimeoutException)) {
            return "it does not answer HTTP (" + why + "); is that the admin port? (a memserver's admin is "
                    + Defaults.MEMSERVER_ADMIN + ", a bridge's " + Defaults.LOOPBACK + ":"
                    + Defaults.BRIDGE_ADMIN_PORT + " unless --admin moved them)";
        }
        return why;
    }

    /**
     * The one line printed when the server says no: for an operation that changes state and was refused (401, 403,
     * 405), "admin: ACTION refused: WHY"; with a hint when the token is missing or wrong.
     */
    private String refusal(int status, String method, String why) {
        boolean refused = status == 401 || status == 403 || status == 405;
        String hint = status != 401 ? ""
                : secret != null ? " (the token given is not the server's)"
                        : " (give --token-file FILE with the server's token)";
        return (refused && method.equals("POST") ? "admin: " + action + " refused: " : "admin: ") + why + hint;
    }

    /** The server's own sentence from {@code {"error": ...}}, or the start of whatever else it sent. */
    static String errorText(String body) {
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

    /** A count from a JSON answer; 0 when it is missing or not a number. */
    static long number(Object value) {
        return value instanceof Number n ? n.longValue() : 0;
    }
}
