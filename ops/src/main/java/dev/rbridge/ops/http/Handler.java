package dev.rbridge.ops.http;

/**
 * Computes the answer to a request, on one of the server's workers. It may throw {@link HttpError} to refuse;
 * anything else it throws, {@link Error}s included, becomes a 500 and is logged. One that has not answered within
 * the handler timeout ({@link OpsHttpConfig#HANDLER_TIMEOUT}) is interrupted, its request answered 503, and what
 * it returns later is dropped.
 */
@FunctionalInterface
public interface Handler {
    HttpResponse handle(HttpRequest request) throws Exception;
}
