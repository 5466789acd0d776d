package dev.rbridge.ops.http;

import java.util.List;

/**
 * An answer that refuses the request: its status, why (counted as {@link #refusal()}), the sentence the peer reads,
 * and headers that go with it ({@code Allow}, {@code WWW-Authenticate}). Thrown by the decoder, the routes and the
 * admin rules; handlers may throw it too.
 */
public final class HttpError extends RuntimeException {
    private final int status;
    private final Refusal refusal;
    private final List<HttpResponse.Header> headers;

    public HttpError(int status, Refusal refusal, String message, HttpResponse.Header... headers) {
        super(message, null, false, false);
        if (status < 400 || status > 599) {
            throw new IllegalArgumentException("an HttpError is a 4xx or 5xx, not " + status);
        }
        this.status = status;
        this.refusal = refusal;
        this.headers = List.of(headers);
    }

    public int status() {
        return status;
    }

    public Refusal refusal() {
        return refusal;
    }

    public List<HttpResponse.Header> headers() {
        return headers;
    }
}
