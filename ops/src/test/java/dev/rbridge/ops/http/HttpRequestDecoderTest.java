package dev.rbridge.ops.http;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Requests fed whole, a byte at a time and split at every position decode the same; every rule and limit holds. */
class HttpRequestDecoderTest {
    private static final int LINE = 256;
    private static final int HEADERS = 512;
    private static final int COUNT = 8;
    private static final int BODY = 64;

    private static HttpRequestDecoder decoder() {
        return new HttpRequestDecoder(new RequestLimits(LINE, HEADERS, COUNT, BODY));
    }

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.ISO_8859_1);
    }

    /** Feeds {@code chunks} in order; returns the requests decoded, each call consuming only its own bytes. */
    private static List<HttpRequest> feed(HttpRequestDecoder d, byte[]... chunks) {
        List<HttpRequest> out = new ArrayList<>();
        ByteBuffer pending = ByteBuffer.allocate(4096);
        for (byte[] chunk : chunks) {
            pending.put(chunk).flip();
            HttpRequest r;
            while ((r = d.next(pending)) != null) {
                out.add(r);
            }
            assertFalse(pending.hasRemaining(), "a null result means every byte was consumed");
            pending.compact();
        }
        return out;
    }

    private static final String GET = "GET /volumes/my%20disk/slabs?all=1 HTTP/1.1\r\nHost: 127.0.0.1:7473\r\n"
            + "Authorization: Bearer s3cret\r\nX-Latin: caf\u00e9\r\n\r\n";
    private static final String POST = "POST /drain HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello";

    private static void assertGet(HttpRequest r) {
        assertEquals("GET", r.method());
        assertEquals("/volumes/my%20disk/slabs", r.path());
        assertEquals(List.of("volumes", "my disk", "slabs"), r.segments());
        assertTrue(r.queryHas("all", "1"));
        assertEquals("HTTP/1.1", r.version());
        assertEquals("Bearer s3cret", r.header("authorization"));
        assertEquals("caf\u00e9", r.header("X-Latin"), "header values are ISO-8859-1");
        assertTrue(r.keepAlive());
        assertEquals(0, r.body().length);
    }

    @Test
    void aRequestDecodesTheSameWholeByteByByteAndSplitAnywhere() {
        byte[] all = bytes(GET);
        assertGet(feed(decoder(), all).getFirst());
        HttpRequestDecoder d = decoder();
        List<HttpRequest> got = new ArrayList<>();
        for (byte b : all) {
            got.addAll(feed(d, new byte[]{b}));
        }
        assertEquals(1, got.size());
        assertGet(got.getFirst());
        for (int split = 0; split <= all.length; split++) {
            List<HttpRequest> r = feed(decoder(), Arrays.copyOf(all, split),
                    Arrays.copyOfRange(all, split, all.length));
            assertEquals(1, r.size(), "split at " + split);
            assertGet(r.getFirst());
        }
    }

    @Test
    void aBodyArrivesInPiecesAndAPipelinedRequestStaysInTheBuffer() {
        byte[] two = bytes(POST + GET);
        for (int split = 0; split <= two.length; split++) {
            List<HttpRequest> r = feed(decoder(), Arrays.copyOf(two, split),
                    Arrays.copyOfRange(two, split, two.length));
            assertEquals(2, r.size(), "split at " + split);
            assertEquals("POST", r.get(0).method());
            assertArrayEquals(bytes("hello"), r.get(0).body());
            assertGet(r.get(1));
        }
        HttpRequestDecoder d = decoder();
        ByteBuffer both = ByteBuffer.wrap(two);
        assertEquals("POST", d.next(both).method());
        assertEquals(GET.length(), both.remaining(), "the second request's bytes are left for the next call");
    }

    @Test
    void bareLineFeedsAndLeadingEmptyLinesAreAccepted() {
        HttpRequest r = feed(decoder(), bytes("\r\n\nGET /stats HTTP/1.0\nConnection: close\n\n")).getFirst();
        assertEquals("/stats", r.path());
        assertFalse(r.keepAlive(), "HTTP/1.0 closes");
        assertFalse(feed(decoder(), bytes("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n\r\n"))
                .getFirst().keepAlive());
    }

    private static HttpError refused(String request) {
        HttpRequestDecoder d = decoder();
        return assertThrows(HttpError.class, () -> {
            for (byte b : bytes(request)) { // a byte at a time: limits hold however the bytes arrive
                d.next(ByteBuffer.wrap(new byte[]{b}));
            }
        }, request);
    }

    @Test
    void limitsAreEnforcedAsBytesArriveNotAfterBuffering() {
        HttpError line = refused("GET /" + "a".repeat(LINE) + " HTTP/1.1\r\n");
        assertEquals(414, line.status());
        assertEquals(Refusal.TOO_LARGE, line.refusal());
        // the refusal comes at byte LINE + 1, before the line ends
        HttpRequestDecoder d = decoder();
        ByteBuffer endless = ByteBuffer.wrap(bytes("GET /" + "a".repeat(10 * LINE)));
        assertThrows(HttpError.class, () -> d.next(endless));
        assertEquals(LINE + 1, endless.position());

        assertEquals(431, refused("GET / HTTP/1.1\r\nHost: a\r\nX: " + "b".repeat(HEADERS) + "\r\n\r\n").status());
        StringBuilder many = new StringBuilder("GET / HTTP/1.1\r\nHost: a\r\n");
        for (int i = 0; i < COUNT; i++) {
            many.append("X-").append(i).append(": 1\r\n");
        }
        assertEquals(431, refused(many + "\r\n").status());
        HttpError body = refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: " + (BODY + 1) + "\r\n\r\n");
        assertEquals(413, body.status(), "refused on the header, before any body byte");
        assertEquals(413, refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999\r\n\r\n")
                .status());
        assertEquals(400, refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9999999999999999999\r\n\r\n")
                .status(), "more digits than a long: not a number we read");
        // a flood of empty lines before a request counts against the request line
        assertEquals(414, refused("\r\n".repeat(LINE)).status());
    }

    @Test
    void grammarAndFramingViolationsAreRefused() {
        String[][] cases = {
                {"400", "GARBAGE\r\n"},
                {"400", "GET /\r\n"},
                {"400", "GET  / HTTP/1.1\r\n"},
                {"400", "GET / HTTP/1.1 extra\r\n"},
                {"400", "GET http://evil.example/ HTTP/1.1\r\n"},
                {"400", "GET * HTTP/1.1\r\n"},
                {"400", "GET /\u00e9 HTTP/1.1\r\n"},
                {"400", "G\u0000T / HTTP/1.1\r\n"},
                {"400", "GET / HTTX/1.1\r\n"},
                {"505", "GET / HTTP/2.0\r\n"},
                {"400", "GET / HTTP/1.1\rX"},
                {"400", "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n"},
                {"400", "GET / HTTP/1.1\r\nHost : a\r\n\r\n"},
                {"400", "GET / HTTP/1.1\r\n: a\r\n\r\n"},
                {"400", "GET / HTTP/1.1\r\nNoColon\r\n\r\n"},
                {"400", "GET / HTTP/1.1\r\nHost: a\u0000b\r\n\r\n"},
                {"400", "GET / HTTP/1.1\r\nHost: a\u007fb\r\n\r\n"},
                {"400", "GET / HTTP/1.1\r\n\r\n"},
                {"400", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"},
                {"400", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"},
                {"400", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"},
                {"400", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n"},
                {"501", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"},
        };
        for (String[] c : cases) {
            HttpError e = refused(c[1]);
            assertEquals(Integer.parseInt(c[0]), e.status(), c[1] + ": " + e.getMessage());
        }
        // the same Content-Length twice is one length, as RFC 9110 allows
        HttpRequest same = feed(decoder(), bytes("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
                + "Content-Length: 2\r\n\r\nok")).getFirst();
        assertArrayEquals(bytes("ok"), same.body());
        assertNull(decoder().next(ByteBuffer.wrap(bytes("GET / HTTP/1.0\r\n"))), "HTTP/1.0 needs no Host");
    }

    @Test
    void pathSegmentsArePercentDecodedStrictly() {
        HttpRequest r = feed(decoder(), bytes("GET //a%2Fb/%C3%A9// HTTP/1.0\r\n\r\n")).getFirst();
        assertEquals(List.of("a/b", "\u00e9"), r.segments());
        for (String bad : new String[]{"/%", "/%4", "/%zz", "/%C3"}) {
            HttpRequest b = feed(decoder(), bytes("GET " + bad + " HTTP/1.0\r\n\r\n")).getFirst();
            assertEquals(400, assertThrows(HttpError.class, b::segments).status(), bad);
        }
    }
}
