package dev.rbridge.ops.http;

import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Locale;

/**
 * The one rule for every admin interface (the memserver's, the bridge's):
 * <ol>
 *   <li>Requests from web pages are refused: any {@code Origin}, or a {@code Sec-Fetch-Site} other than {@code none}
 *       (403). A page can send requests to localhost; only browsers add these headers, so rbridge admin and curl
 *       are unaffected.</li>
 *   <li>On a connection that arrived on a loopback address, the {@code Host} must be a loopback name or address
 *       (403): a page whose own name was re-pointed at 127.0.0.1 (DNS rebinding) sends its own name.</li>
 *   <li>A server with a token takes requests from loopback peers only (403 otherwise, before the token is looked
 *       at): this HTTP has no TLS, so a token sent across a network could be read off it. Remote operators run
 *       {@code rbridge admin} on the host (over ssh) or tunnel the port.</li>
 *   <li>Reads (GET, HEAD) need the token when one is configured (401), as before.</li>
 *   <li>Operations that change state (POST only) always need the token, also on loopback (401); without a
 *       configured token they are off (403 naming the option that turns them on).</li>
 * </ol>
 * Metrics and health endpoints are not admin and take none of this (see {@link Routes.Kind#OPEN}).
 */
public final class AdminRules {
    private final String token;
    private final String service;
    private final String tokenOption;

    /**
     * @param token       the configured token, or null for none
     * @param service     what answers, for messages ("memserver", "bridge")
     * @param tokenOption how an operator configures the token, for the 403 that says mutations are off
     */
    public AdminRules(String token, String service, String tokenOption) {
        this.token = token == null || token.isEmpty() ? null : token;
        this.service = service;
        this.tokenOption = tokenOption;
    }

    public boolean hasToken() {
        return token != null;
    }

    void checkBrowser(HttpRequest r) {
        String origin = r.header("Origin");
        if (origin != null) {
            throw new HttpError(403, Refusal.BROWSER, "requests from web pages are refused (Origin: "
                    + printable(origin) + "); use rbridge admin or curl");
        }
        String site = r.header("Sec-Fetch-Site");
        if (site != null && !site.equalsIgnoreCase("none")) {
            throw new HttpError(403, Refusal.BROWSER, "requests from web pages are refused (Sec-Fetch-Site: "
                    + printable(site) + "); use rbridge admin or curl");
        }
        if (r.local() != null && r.local().getAddress().isLoopbackAddress()) {
            String host = r.header("Host");
            if (host != null && !isLoopbackHost(host)) {
                throw new HttpError(403, Refusal.HOST, "Host '" + printable(host) + "' is not a loopback name;"
                        + " this admin interface answers only requests addressed to localhost or a loopback address"
                        + " (DNS rebinding protection)");
            }
        }
    }

    void checkRead(HttpRequest r) {
        checkLoopback(r);
        if (token != null && !presentsToken(r)) {
            throw unauthorized();
        }
    }

    void checkMutate(HttpRequest r) {
        if (token == null) {
            throw new HttpError(403, Refusal.MUTATIONS_OFF, r.method() + " " + r.path() + " is off: operations that"
                    + " change state need a token, and this " + service + " has none (start it with " + tokenOption
                    + " FILE and give rbridge admin the same)");
        }
        checkLoopback(r);
        if (!presentsToken(r)) {
            throw unauthorized();
        }
    }

    private void checkLoopback(HttpRequest r) {
        if (token != null && r.peer() != null && !r.peer().getAddress().isLoopbackAddress()) {
            throw new HttpError(403, Refusal.TOKEN_OFF_LOOPBACK, "this " + service + "'s admin interface takes its"
                    + " token from loopback only: it speaks plain HTTP, so a token sent across the network can be read"
                    + " on the way. Run rbridge admin on the host (ssh HOST rbridge admin ...) or tunnel the port"
                    + " (ssh -L PORT:127.0.0.1:PORT HOST)");
        }
    }

    private HttpError unauthorized() {
        return new HttpError(401, Refusal.UNAUTHORIZED, "wrong or missing token",
                new HttpResponse.Header("WWW-Authenticate", "Bearer"));
    }

    private boolean presentsToken(HttpRequest r) {
        String auth = r.header("Authorization");
        // one header, compared in constant time: its length is the only thing a guesser learns
        return auth != null && r.headerCount("Authorization") == 1 && MessageDigest.isEqual(
                auth.getBytes(StandardCharsets.ISO_8859_1), ("Bearer " + token).getBytes(StandardCharsets.UTF_8));
    }

    /**
     * {@code localhost}, a name under {@code .localhost} (RFC 6761: never resolved outside this host), or a loopback
     * IP literal, with an optional port. Never a DNS lookup: the name is the attacker's.
     */
    static boolean isLoopbackHost(String host) {
        String h = host.trim();
        if (h.startsWith("[")) {
            int end = h.indexOf(']');
            if (end < 0 || !(end == h.length() - 1 || (h.charAt(end + 1) == ':' && port(h.substring(end + 2))))) {
                return false;
            }
            h = h.substring(1, end);
        } else {
            int colon = h.indexOf(':');
            if (colon >= 0) {
                if (!port(h.substring(colon + 1))) {
                    return false;
                }
                h = h.substring(0, colon);
            }
        }
        String name = h.toLowerCase(Locale.ROOT);
        if (name.endsWith(".")) {
            name = name.substring(0, name.length() - 1);
        }
        if (name.equals("localhost") || name.endsWith(".localhost")) {
            return true;
        }
        if (!name.matches("[0-9a-f:.]+")) {
            return false;
        }
        try {
            InetAddress a = InetAddress.ofLiteral(name);
            return a.isLoopbackAddress();
        } catch (IllegalArgumentException e) {
            return false; // not an IP literal and not localhost
        }
    }

    private static boolean port(String p) {
        return !p.isEmpty() && p.length() <= 5 && p.chars().allMatch(c -> c >= '0' && c <= '9');
    }

    /** A peer's header value inside our message: printable ASCII, at most 100 characters. */
    static String printable(String s) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < s.length() && b.length() < 100; i++) {
            char c = s.charAt(i);
            b.append(c >= 0x20 && c < 0x7f ? c : '?');
        }
        return s.length() > 100 ? b + "..." : b.toString();
    }
}
