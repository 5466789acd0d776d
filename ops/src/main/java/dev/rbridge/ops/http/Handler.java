package dev.rbridge.ops.http;

/**
 * Computes the answer to a request, on one of the server's workers. It may throw {@link HttpError} to refuse;
 * anything else it throws becomes a 500 and is logged.
 */
@FunctionalInterface
public interface Handler {
    HttpResponse handle(HttpRequest request) throws Exception;
}
