package dev.rbridge.ops.http;

import java.io.ByteArrayOutputStream;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * One request as {@link HttpRequestDecoder} read it: already checked against the limits and the grammar, so
 * nothing here needs checking again. Header values are ISO-8859-1 as HTTP defines them; the path is kept as sent
 * (percent-encoded) and {@link #segments()} decodes it.
 *
 * @param target  the request target as sent: an origin-form path with an optional query
 * @param peer    who sent it (null until the server sets it)
 * @param local   the address it arrived on (null until the server sets it)
 * @param params  path segments a route captured by name ({@code /clients/{id}/disconnect}: {@code id})
 */
public record HttpRequest(String method, String target, String version, List<Header> headers, byte[] body,
        InetSocketAddress peer, InetSocketAddress local, Map<String, String> params) {
    public record Header(String name, String value) {
    }

    public HttpRequest {
        headers = List.copyOf(headers);
        params = Map.copyOf(params);
    }

    HttpRequest from(InetSocketAddress peer, InetSocketAddress local) {
        return new HttpRequest(method, target, version, headers, body, peer, local, params);
    }

    HttpRequest withParams(Map<String, String> params) {
        return new HttpRequest(method, target, version, headers, body, peer, local, params);
    }

    /** The path part of the target, percent-encoded as sent. */
    public String path() {
        int q = target.indexOf('?');
        return q < 0 ? target : target.substring(0, q);
    }

    /** The query part of the target without the {@code ?}, or the empty string. */
    public String query() {
        int q = target.indexOf('?');
        return q < 0 ? "" : target.substring(q + 1);
    }

    /** Whether the query has {@code name=value} among its {@code &}-separated parts (compared as sent). */
    public boolean queryHas(String name, String value) {
        for (String part : query().split("&")) {
            if (part.equals(name + "=" + value)) {
                return true;
            }
        }
        return false;
    }

    /** The first value of a header (names compare without case), or null. */
    public String header(String name) {
        for (Header h : headers) {
            if (h.name().equalsIgnoreCase(name)) {
                return h.value();
            }
        }
        return null;
    }

    /** How many times a header was sent. */
    public int headerCount(String name) {
        int n = 0;
        for (Header h : headers) {
            if (h.name().equalsIgnoreCase(name)) {
                n++;
            }
        }
        return n;
    }

    /** A captured path segment (decoded). */
    public String param(String name) {
        String v = params.get(name);
        if (v == null) {
            throw new IllegalStateException("the route captured no '" + name + "'");
        }
        return v;
    }

    /**
     * HTTP/1.1 keeps the connection unless the client says {@code Connection: close}; HTTP/1.0 connections close
     * after one answer (their keep-alive extension is not worth the second rule).
     */
    public boolean keepAlive() {
        if (!version.equals("HTTP/1.1")) {
            return false;
        }
        for (Header h : headers) {
            if (h.name().equalsIgnoreCase("Connection")) {
                for (String token : h.value().split(",")) {
                    if (token.trim().toLowerCase(Locale.ROOT).equals("close")) {
                        return false;
                    }
                }
            }
        }
        return true;
    }

    /**
     * The path's segments, percent-decoded as UTF-8, without empty ones ({@code //clients/} is {@code [clients]}).
     *
     * @throws HttpError 400 for a bad escape or bytes that are not UTF-8
     */
    public List<String> segments() {
        List<String> out = new ArrayList<>();
        for (String s : path().split("/")) {
            if (!s.isEmpty()) {
                out.add(decode(s));
            }
        }
        return out;
    }

    private static String decode(String segment) {
        if (segment.indexOf('%') < 0) {
            return segment;
        }
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(segment.length());
        for (int i = 0; i < segment.length(); i++) {
            char c = segment.charAt(i);
            if (c != '%') {
                bytes.write(c);
                continue;
            }
            int hi = i + 2 < segment.length() ? Character.digit(segment.charAt(i + 1), 16) : -1;
            int lo = hi >= 0 ? Character.digit(segment.charAt(i + 2), 16) : -1;
            if (lo < 0) {
                throw new HttpError(400, Refusal.MALFORMED, "bad percent escape in path segment '" + segment + "'");
            }
            bytes.write(hi << 4 | lo);
            i += 2;
        }
        try {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(bytes.toByteArray())).toString();
        } catch (CharacterCodingException e) {
            throw new HttpError(400, Refusal.MALFORMED, "path segment '" + segment + "' is not UTF-8");
        }
    }
}
