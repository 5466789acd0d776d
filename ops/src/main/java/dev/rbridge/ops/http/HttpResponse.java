package dev.rbridge.ops.http;

import dev.rbridge.ops.json.Json;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;

/**
 * A complete answer: status, content type, body, any extra headers, and what to do once it is out.
 *
 * @param afterSent run on a thread of its own once the answer is written (or the connection is gone before), for
 *                  operations that must not begin before their answer leaves, such as stopping the process; or null.
 *                  Never run for an answer that came after the handler timeout (its request was answered 503).
 */
public record HttpResponse(int status, String contentType, byte[] body, List<Header> headers, Runnable afterSent) {
    public static final String TEXT = "text/plain; charset=utf-8";
    public static final String JSON = "application/json";

    /** One header line; names and values are ours, never the peer's, so they are not escaped. */
    public record Header(String name, String value) {
        public Header {
            if (!name.matches("[A-Za-z0-9-]+") || value.chars().anyMatch(c -> c < 0x20 || c > 0x7e)) {
                throw new IllegalArgumentException("not a header we would send: " + name + ": " + value);
            }
        }
    }

    public HttpResponse {
        if (status < 100 || status > 599) {
            throw new IllegalArgumentException("HTTP status " + status);
        }
        headers = List.copyOf(headers);
    }

    public HttpResponse(int status, String contentType, byte[] body, List<Header> headers) {
        this(status, contentType, body, headers, null);
    }

    public static HttpResponse text(int status, String body) {
        return of(status, TEXT, body);
    }

    /** {@code value} written by {@link Json#write} and a newline, so a terminal prompt starts on its own line. */
    public static HttpResponse json(int status, Object value) {
        return of(status, JSON, Json.write(value) + "\n");
    }

    public static HttpResponse of(int status, String contentType, String body) {
        return new HttpResponse(status, contentType, body.getBytes(StandardCharsets.UTF_8), List.of());
    }

    public HttpResponse withHeaders(List<Header> more) {
        List<Header> all = new ArrayList<>(headers);
        all.addAll(more);
        return new HttpResponse(status, contentType, body, all, afterSent);
    }

    public HttpResponse afterSent(Runnable action) {
        return new HttpResponse(status, contentType, body, headers, action);
    }

    /**
     * The bytes on the wire. Every answer says how long it is and whether the connection stays, and tells browsers
     * not to cache or sniff it.
     *
     * @param head     a HEAD request: the headers of the GET answer without its body
     * @param close    the server closes the connection after this answer
     */
    public ByteBuffer encode(boolean head, boolean close) {
        StringBuilder b = new StringBuilder(160).append("HTTP/1.1 ").append(status).append(' ').append(reason(status))
                .append("\r\nDate: ")
                .append(DateTimeFormatter.RFC_1123_DATE_TIME.format(ZonedDateTime.now(ZoneOffset.UTC)))
                .append("\r\nContent-Type: ").append(contentType)
                .append("\r\nContent-Length: ").append(body.length)
                .append("\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: ")
                .append(close ? "close" : "keep-alive").append("\r\n");
        for (Header h : headers) {
            b.append(h.name()).append(": ").append(h.value()).append("\r\n");
        }
        byte[] start = b.append("\r\n").toString().getBytes(StandardCharsets.US_ASCII);
        ByteBuffer out = ByteBuffer.allocate(start.length + (head ? 0 : body.length));
        out.put(start);
        if (!head) {
            out.put(body);
        }
        return out.flip();
    }

    static String reason(int status) {
        return switch (status) {
            case 200 -> "OK";
            case 202 -> "Accepted";
            case 204 -> "No Content";
            case 400 -> "Bad Request";
            case 401 -> "Unauthorized";
            case 403 -> "Forbidden";
            case 404 -> "Not Found";
            case 405 -> "Method Not Allowed";
            case 408 -> "Request Timeout";
            case 409 -> "Conflict";
            case 413 -> "Content Too Large";
            case 414 -> "URI Too Long";
            case 431 -> "Request Header Fields Too Large";
            case 500 -> "Internal Server Error";
            case 501 -> "Not Implemented";
            case 503 -> "Service Unavailable";
            case 505 -> "HTTP Version Not Supported";
            default -> status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
        };
    }
}
