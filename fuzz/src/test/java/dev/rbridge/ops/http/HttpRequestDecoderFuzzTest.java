package dev.rbridge.ops.http;

import static dev.rbridge.fuzz.Feeds.check;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;

import org.junit.jupiter.api.Tag;

import com.code_intelligence.jazzer.api.FuzzedDataProvider;
import com.code_intelligence.jazzer.junit.FuzzTest;

import dev.rbridge.fuzz.Feeds;

/**
 * The admin HTTP request decoder against any bytes a peer can send: requests or an {@link HttpError} of the statuses
 * its contract names, nothing else; no request exceeds the limits it was given (request line, header bytes, header
 * count, body) nor takes more bytes than were sent; a request re-encoded canonically (CRLF, {@code Name: value})
 * decodes to an equal request; the path's segments decode or fail with a 400; the same outcome whole, cut in two, or a
 * byte at a time. Parameters (4 bytes each from the end, see {@link Feeds}): cut position, then the limits.
 */
@Tag("fuzz")
class HttpRequestDecoderFuzzTest {
    private static final Set<Integer> STATUSES = Set.of(400, 413, 414, 431, 501, 505);

    /** A request's fields that the decoder sets, comparable (its body is an array). */
    private record Seen(String method, String target, String version, List<HttpRequest.Header> headers, String body) {
        static Seen of(HttpRequest r) {
            return new Seen(r.method(), r.target(), r.version(), r.headers(),
                    new String(r.body(), StandardCharsets.ISO_8859_1));
        }
    }

    private record Outcome(List<Seen> requests, int status) {
    }

    @FuzzTest(maxDuration = "10s")
    void decode(FuzzedDataProvider data) {
        int cut = data.consumeInt();
        RequestLimits limits = new RequestLimits(1 + Math.floorMod(data.consumeInt(), 4096),
                1 + Math.floorMod(data.consumeInt(), 8192), Math.floorMod(data.consumeInt(), 64),
                Math.floorMod(data.consumeInt(), 1 << 16));
        byte[] stream = data.consumeRemainingAsBytes();
        Outcome first = null;
        for (int mode = 0; mode < Feeds.modes(stream.length); mode++) {
            Outcome o = run(stream, Feeds.limits(mode, stream.length, cut), limits);
            if (first == null) {
                first = o;
            } else if (!first.equals(o)) {
                throw new AssertionError("feeding mode " + mode + " decoded " + o + ", whole input " + first);
            }
        }
    }

    private static Outcome run(byte[] stream, int[] cuts, RequestLimits limits) {
        HttpRequestDecoder decoder = new HttpRequestDecoder(limits);
        ByteBuffer in = ByteBuffer.wrap(stream);
        List<Seen> out = new ArrayList<>();
        int start = 0;
        for (int limit : cuts) {
            in.limit(limit);
            while (true) {
                HttpRequest r;
                try {
                    r = decoder.next(in);
                } catch (HttpError e) {
                    check(STATUSES.contains(e.status()) && e.getMessage() != null && !e.getMessage().isEmpty(),
                            () -> "an HttpError " + e.status() + " (" + e.getMessage() + ")");
                    return new Outcome(out, e.status());
                }
                if (r == null) {
                    check(!in.hasRemaining(), () -> "the decoder stopped with " + in.remaining() + " bytes unread");
                    break;
                }
                checkRequest(r, in.position() - start, limits);
                out.add(Seen.of(r));
                start = in.position();
                check(!decoder.inProgress(), "in progress right after a request");
            }
        }
        return new Outcome(out, 0);
    }

    private static void checkRequest(HttpRequest r, int took, RequestLimits limits) {
        check(r.headers().size() <= limits.headers() && r.body().length <= limits.body(),
                () -> r + " exceeds the limits");
        check(took <= limits.requestLine() + limits.headerBytes() + r.body().length,
                () -> "a request of " + took + " bytes within limits " + limits);
        check(r.target().startsWith("/") && (r.version().equals("HTTP/1.1") || r.version().equals("HTTP/1.0")),
                () -> "target " + r.target() + ", version " + r.version());
        String length = r.header("Content-Length");
        check(length == null ? r.body().length == 0 : Long.parseLong(length) == r.body().length,
                () -> "a body of " + r.body().length + " bytes for Content-Length " + length);
        try {
            for (String s : r.segments()) {
                check(!s.isEmpty(), "an empty path segment");
            }
        } catch (HttpError e) {
            check(e.status() == 400, () -> "segments() failed with " + e.status());
        }
        r.keepAlive();
        r.query();
        // Re-encoded canonically, it reads back the same (with limits that hold it whole).
        ByteArrayOutputStream enc = new ByteArrayOutputStream();
        enc.writeBytes(
                (r.method() + " " + r.target() + " " + r.version() + "\r\n").getBytes(StandardCharsets.US_ASCII));
        for (HttpRequest.Header h : r.headers()) {
            enc.writeBytes((h.name() + ": " + h.value() + "\r\n").getBytes(StandardCharsets.ISO_8859_1));
        }
        enc.writeBytes("\r\n".getBytes(StandardCharsets.US_ASCII));
        enc.writeBytes(r.body());
        byte[] bytes = enc.toByteArray();
        HttpRequest again = new HttpRequestDecoder(new RequestLimits(bytes.length, bytes.length, r.headers().size(),
                r.body().length))
                .next(ByteBuffer.wrap(bytes));
        check(again != null && Seen.of(again).equals(Seen.of(r)) && Arrays.equals(again.body(), r.body()),
                () -> r + " re-encoded reads back as " + again);
    }
}
