package dev.rbridge.ops.http;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * HTTP/1.x requests from bytes, as a state machine that never blocks and never buffers more than its limits: feed it
 * whatever arrived with {@link #next}, which returns a request once one is complete (consuming only that request's
 * bytes, so a pipelined next one stays in the buffer) and null while input runs dry.
 *
 * <p>What it accepts is narrower than what HTTP allows, on purpose: origin-form targets only, no chunked bodies, no
 * header folding, no control characters, one {@code Host}, one {@code Content-Length} value. Everything else is an
 * {@link HttpError} (400, 413, 414, 431, 501, 505), after which the connection is closed: a stream that broke a rule
 * cannot be trusted to be framed.
 */
public final class HttpRequestDecoder {
    private enum State {
        REQUEST_LINE, HEADER_LINE, BODY
    }

    private static final int MAX_METHOD = 32;
    private static final int MAX_CONTENT_LENGTH_DIGITS = 18;

    private final RequestLimits limits;
    private final byte[] line;

    private State state = State.REQUEST_LINE;
    private int lineLength;
    private boolean afterCr;
    private int requestLineBytes;
    private int headerBytes;
    private boolean started;
    private String method;
    private String target;
    private String version;
    private List<HttpRequest.Header> headers = new ArrayList<>();
    private byte[] body;
    private int bodyFilled;

    public HttpRequestDecoder(RequestLimits limits) {
        this.limits = limits;
        this.line = new byte[Math.max(limits.requestLine(), limits.headerBytes())];
    }

    /** Whether some bytes of a request have arrived and the request is not complete yet. */
    public boolean inProgress() {
        return started;
    }

    /**
     * Consumes bytes from {@code in} up to the end of one request.
     *
     * @return the request, or null when {@code in} ran dry first (what was consumed is kept)
     * @throws HttpError when the bytes break a rule or a limit; the decoder is then spent
     */
    public HttpRequest next(ByteBuffer in) {
        while (in.hasRemaining()) {
            if (state == State.BODY) {
                int n = Math.min(in.remaining(), body.length - bodyFilled);
                in.get(body, bodyFilled, n);
                bodyFilled += n;
                if (bodyFilled == body.length) {
                    return finish();
                }
                continue;
            }
            byte b = in.get();
            started = true;
            if (state == State.REQUEST_LINE) {
                if (++requestLineBytes > limits.requestLine()) {
                    throw new HttpError(414, Refusal.TOO_LARGE, "request line longer than " + limits.requestLine()
                            + " bytes");
                }
            } else if (++headerBytes > limits.headerBytes()) {
                throw new HttpError(431, Refusal.TOO_LARGE, "request headers longer than " + limits.headerBytes()
                        + " bytes");
            }
            if (afterCr) {
                if (b != '\n') {
                    throw malformed("a CR not followed by LF");
                }
                afterCr = false;
            } else if (b == '\r') {
                afterCr = true;
                continue;
            } else if (b != '\n') {
                line[lineLength++] = b;
                continue;
            }
            HttpRequest done = endOfLine();
            if (done != null) {
                return done;
            }
        }
        return null;
    }

    private HttpRequest endOfLine() {
        int n = lineLength;
        lineLength = 0;
        if (state == State.REQUEST_LINE) {
            if (n > 0) { // empty lines before a request are allowed (RFC 9112 2.2)
                requestLine(n);
                state = State.HEADER_LINE;
            }
            return null;
        }
        if (n > 0) {
            header(n);
            return null;
        }
        int length = contentLength();
        if (length == 0) {
            body = new byte[0];
            return finish();
        }
        body = new byte[length];
        state = State.BODY;
        return null;
    }

    private void requestLine(int n) {
        int sp1 = indexOf((byte) ' ', 0, n);
        int sp2 = sp1 < 0 ? -1 : indexOf((byte) ' ', sp1 + 1, n);
        if (sp2 < 0 || indexOf((byte) ' ', sp2 + 1, n) >= 0) {
            throw malformed("the request line is not METHOD TARGET VERSION");
        }
        if (sp1 == 0 || sp1 > MAX_METHOD || !all(0, sp1, HttpRequestDecoder::tchar)) {
            throw malformed("bad method");
        }
        if (sp2 == sp1 + 1 || line[sp1 + 1] != '/' || !all(sp1 + 1, sp2, c -> c > 0x20 && c < 0x7f)) {
            throw malformed("the target must be a path starting with / (printable ASCII, no spaces)");
        }
        method = ascii(0, sp1);
        target = ascii(sp1 + 1, sp2);
        version = ascii(sp2 + 1, n);
        if (!version.equals("HTTP/1.1") && !version.equals("HTTP/1.0")) {
            if (version.matches("HTTP/[0-9]\\.[0-9]")) {
                throw new HttpError(505, Refusal.UNSUPPORTED, version + " is not supported (HTTP/1.1 or 1.0)");
            }
            throw malformed("bad HTTP version");
        }
    }

    private void header(int n) {
        if (line[0] == ' ' || line[0] == '\t') {
            throw malformed("folded header lines are not accepted");
        }
        if (headers.size() >= limits.headers()) {
            throw new HttpError(431, Refusal.TOO_LARGE, "more than " + limits.headers() + " request headers");
        }
        int colon = indexOf((byte) ':', 0, n);
        if (colon <= 0 || !all(0, colon, HttpRequestDecoder::tchar)) {
            throw malformed("a header line without a NAME: before its value");
        }
        int from = colon + 1;
        int to = n;
        while (from < to && (line[from] == ' ' || line[from] == '\t')) {
            from++;
        }
        while (to > from && (line[to - 1] == ' ' || line[to - 1] == '\t')) {
            to--;
        }
        if (!all(from, to, c -> c == '\t' || (c >= 0x20 && c != 0x7f))) {
            throw malformed("a control character in header " + ascii(0, colon));
        }
        headers.add(new HttpRequest.Header(ascii(0, colon), new String(line, from, to - from,
                StandardCharsets.ISO_8859_1)));
    }

    /** Framing rules that keep two readers of this stream from disagreeing where the request ends. */
    private int contentLength() {
        HttpRequest probe = request();
        if (probe.header("Transfer-Encoding") != null) {
            throw new HttpError(501, Refusal.UNSUPPORTED, "Transfer-Encoding is not supported; send Content-Length");
        }
        int hosts = probe.headerCount("Host");
        if (hosts > 1 || (hosts == 0 && version.equals("HTTP/1.1"))) {
            throw malformed("an HTTP/1.1 request needs exactly one Host header");
        }
        String length = null;
        for (HttpRequest.Header h : headers) {
            if (h.name().equalsIgnoreCase("Content-Length")) {
                if (length != null && !length.equals(h.value())) {
                    throw malformed("conflicting Content-Length headers");
                }
                length = h.value();
            }
        }
        if (length == null) {
            return 0;
        }
        if (length.isEmpty() || length.length() > MAX_CONTENT_LENGTH_DIGITS || !length.chars().allMatch(
                c -> c >= '0' && c <= '9')) {
            throw malformed("Content-Length is not a number");
        }
        long value = Long.parseLong(length);
        if (value > limits.body()) {
            throw new HttpError(413, Refusal.TOO_LARGE, "request body of " + value + " bytes; at most "
                    + limits.body());
        }
        return (int) value;
    }

    private HttpRequest request() {
        return new HttpRequest(method, target, version, headers, body, null, null, Map.of());
    }

    private HttpRequest finish() {
        HttpRequest r = request();
        state = State.REQUEST_LINE;
        started = false;
        requestLineBytes = 0;
        headerBytes = 0;
        headers = new ArrayList<>();
        body = null;
        bodyFilled = 0;
        method = target = version = null;
        return r;
    }

    private static HttpError malformed(String what) {
        return new HttpError(400, Refusal.MALFORMED, "malformed request: " + what);
    }

    private int indexOf(byte b, int from, int to) {
        for (int i = from; i < to; i++) {
            if (line[i] == b) {
                return i;
            }
        }
        return -1;
    }

    private interface BytePredicate {
        boolean test(int b);
    }

    private boolean all(int from, int to, BytePredicate p) {
        for (int i = from; i < to; i++) {
            if (!p.test(line[i] & 0xff)) {
                return false;
            }
        }
        return true;
    }

    private String ascii(int from, int to) {
        return new String(line, from, to - from, StandardCharsets.US_ASCII);
    }

    /** RFC 9110 token characters. */
    private static boolean tchar(int c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                || "!#$%&'*+-.^_`|~".indexOf(c) >= 0;
    }
}
