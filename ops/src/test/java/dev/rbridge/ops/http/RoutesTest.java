package dev.rbridge.ops.http;

import org.junit.jupiter.api.Test;

import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The admin rule, the same for every admin interface: browsers out, state changes by POST with a token only. */
class RoutesTest {
    private static final InetSocketAddress LOOPBACK = new InetSocketAddress("127.0.0.1", 7472);
    private static final InetSocketAddress PUBLIC = new InetSocketAddress("192.0.2.7", 7472);

    private static Routes routes(String token) {
        return Routes.builder(new AdminRules(token, "memserver", "--token-file"))
                .read("/clients", r -> HttpResponse.text(200, "clients"))
                .mutate("/clients/{id}/disconnect", r -> HttpResponse.text(200, "cut " + r.param("id")))
                .mutate("/drain", r -> HttpResponse.text(202, "draining"))
                .build();
    }

    private static HttpRequest request(String method, String path, InetSocketAddress local, String... headers) {
        List<HttpRequest.Header> h = new ArrayList<>();
        h.add(new HttpRequest.Header("Host", local.getHostString() + ":" + local.getPort()));
        for (int i = 0; i < headers.length; i += 2) {
            h.add(new HttpRequest.Header(headers[i], headers[i + 1]));
        }
        return new HttpRequest(method, path, "HTTP/1.1", h, new byte[0], new InetSocketAddress("127.0.0.1", 40000),
                local, Map.of());
    }

    private static HttpRequest withHost(String method, String path, String host, String... more) {
        List<HttpRequest.Header> h = new ArrayList<>();
        h.add(new HttpRequest.Header("Host", host));
        for (int i = 0; i < more.length; i += 2) {
            h.add(new HttpRequest.Header(more[i], more[i + 1]));
        }
        return new HttpRequest(method, path, "HTTP/1.1", h, new byte[0], new InetSocketAddress("127.0.0.1", 40000),
                LOOPBACK, Map.of());
    }

    private static HttpError refused(Routes routes, HttpRequest r) {
        return assertThrows(HttpError.class, () -> routes.handle(r), r.method() + " " + r.path());
    }

    private static String answer(Routes routes, HttpRequest r) throws Exception {
        return new String(routes.handle(r).body(), StandardCharsets.UTF_8);
    }

    @Test
    void withoutATokenReadsAreOpenAndStateChangesAreOffSayingHowToTurnThemOn() throws Exception {
        Routes open = routes(null);
        assertEquals("clients", answer(open, request("GET", "/clients", LOOPBACK)));
        HttpError off = refused(open, request("POST", "/drain", LOOPBACK));
        assertEquals(403, off.status());
        assertEquals(Refusal.MUTATIONS_OFF, off.refusal());
        assertTrue(off.getMessage().contains("--token-file") && off.getMessage().contains("memserver"),
                off.getMessage());
        assertEquals(403, refused(open, request("POST", "/drain", LOOPBACK, "Authorization", "Bearer x")).status(),
                "a token the server does not have opens nothing");
    }

    @Test
    void withATokenEveryRequestNeedsItLoopbackIncluded() throws Exception {
        Routes guarded = routes("s3cret");
        for (HttpRequest r : List.of(request("GET", "/clients", LOOPBACK), request("POST", "/drain", LOOPBACK),
                request("POST", "/drain", LOOPBACK, "Authorization", "Bearer wrong"),
                request("POST", "/drain", LOOPBACK, "Authorization", "s3cret"),
                request("POST", "/drain", LOOPBACK, "Authorization", "Bearer s3cret", "Authorization",
                        "Bearer s3cret"))) {
            HttpError e = refused(guarded, r);
            assertEquals(401, e.status(), r.headers().toString());
            assertEquals("WWW-Authenticate", e.headers().getFirst().name());
        }
        assertEquals("clients", answer(guarded, request("GET", "/clients", LOOPBACK, "Authorization",
                "Bearer s3cret")));
        assertEquals("cut 7", answer(guarded, request("POST", "/clients/7/disconnect", PUBLIC, "Authorization",
                "Bearer s3cret")));
    }

    /**
     * The admin HTTP has no TLS, so a token that crossed a network could be read off it: a server with a token takes
     * it from loopback peers only, whatever address it listens on, and says how to reach it instead.
     */
    @Test
    void theTokenIsTakenFromLoopbackPeersOnly() throws Exception {
        Routes guarded = routes("s3cret");
        InetSocketAddress remotePeer = new InetSocketAddress("192.0.2.99", 40000);
        for (String method : List.of("GET", "POST")) {
            String path = method.equals("GET") ? "/clients" : "/drain";
            HttpRequest r = new HttpRequest(method, path, "HTTP/1.1", List.of(new HttpRequest.Header("Host",
                    "192.0.2.7:7472"), new HttpRequest.Header("Authorization", "Bearer s3cret")), new byte[0],
                    remotePeer, PUBLIC, Map.of());
            HttpError e = refused(guarded, r);
            assertEquals(403, e.status(), method);
            assertEquals(Refusal.TOKEN_OFF_LOOPBACK, e.refusal());
            assertTrue(e.getMessage().contains("loopback") && e.getMessage().contains("ssh"), e.getMessage());
        }
        // Without a token nothing secret is asked for: reads stay open to anyone who can reach the port.
        assertEquals("clients", answer(routes(null), new HttpRequest("GET", "/clients", "HTTP/1.1",
                List.of(new HttpRequest.Header("Host", "192.0.2.7:7472")), new byte[0], remotePeer, PUBLIC,
                Map.of())));
    }

    @Test
    void stateChangesArePostOnlyAndUnknownPathsAre404() {
        Routes guarded = routes("s3cret");
        HttpError get = refused(guarded, request("GET", "/drain", LOOPBACK, "Authorization", "Bearer s3cret"));
        assertEquals(405, get.status());
        assertEquals(Refusal.METHOD, get.refusal());
        assertEquals("POST", get.headers().getFirst().value());
        assertEquals(405, refused(guarded, request("PUT", "/clients", LOOPBACK)).status());
        assertEquals(405, refused(guarded, request("OPTIONS", "/drain", LOOPBACK)).status(),
                "no CORS preflight is ever answered");
        HttpError missing = refused(guarded, request("GET", "/nope", LOOPBACK));
        assertEquals(404, missing.status());
        assertTrue(missing.getMessage().contains("POST /drain"), missing.getMessage());
    }

    @Test
    void browsersAreRefusedWhateverTheyCarry() {
        Routes guarded = routes("s3cret");
        for (String[] h : new String[][]{{"Origin", "http://evil.example"}, {"Origin", "null"},
                {"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Site", "same-origin"}}) {
            HttpError e = refused(guarded, request("POST", "/drain", LOOPBACK, "Authorization", "Bearer s3cret",
                    h[0], h[1]));
            assertEquals(403, e.status(), h[0] + ": " + h[1]);
            assertEquals(Refusal.BROWSER, e.refusal());
        }
        assertEquals(403, refused(routes(null), request("GET", "/clients", LOOPBACK, "Origin", "http://x")).status(),
                "reads too: a page must not read the admin interface");
        assertEquals(403, refused(guarded, request("GET", "/nope", LOOPBACK, "Origin", "http://x")).status(),
                "before 404: a page learns nothing about paths");
    }

    @Test
    void onLoopbackTheHostMustBeALoopbackName() throws Exception {
        Routes open = routes(null);
        for (String host : new String[]{"evil.example", "evil.example:7472", "127.0.0.1.evil.example",
                "localhost.evil.example", "10.0.0.5:7472", "0.0.0.0:7472", "[::ffff:10.0.0.1]:1", "local host",
                "localhost:x", "[::1"}) {
            HttpError e = refused(open, withHost("GET", "/clients", host));
            assertEquals(403, e.status(), host);
            assertEquals(Refusal.HOST, e.refusal());
        }
        for (String host : new String[]{"127.0.0.1:7472", "127.0.0.1", "localhost", "LOCALHOST:7472", "localhost.",
                "rbridge.localhost:7472", "[::1]:7472", "[::1]", "127.9.9.9:1"}) {
            assertEquals("clients", answer(open, withHost("GET", "/clients", host)), host);
        }
        // bound elsewhere, a request may name the host as its client knows it
        HttpRequest remote = new HttpRequest("GET", "/clients", "HTTP/1.1",
                List.of(new HttpRequest.Header("Host", "mem1.example:7472")), new byte[0],
                new InetSocketAddress("192.0.2.1", 1), PUBLIC, Map.of());
        assertEquals("clients", answer(open, remote));
    }

    @Test
    void openRoutesTakeNoRules() throws Exception {
        Routes metrics = Routes.builder(null).open("/metrics", r -> HttpResponse.text(200, "m")).build();
        assertEquals("m", answer(metrics, withHost("GET", "/metrics", "evil.example", "Origin", "http://x")));
        assertEquals(405, refused(metrics, withHost("POST", "/metrics", "localhost")).status());
        assertFalse(AdminRules.isLoopbackHost("2130706433.evil"));
        assertThrows(IllegalStateException.class, () -> Routes.builder(null).read("/x", r -> null));
    }
}
