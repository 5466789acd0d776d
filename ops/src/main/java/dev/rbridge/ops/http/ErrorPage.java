package dev.rbridge.ops.http;

import java.util.Map;

/** How a server words its refusals: plain text for the metrics endpoint, {@code {"error": ...}} for admin. */
@FunctionalInterface
public interface ErrorPage {
    HttpResponse render(int status, String message);

    ErrorPage TEXT = (status, message) -> HttpResponse.text(status, message + "\n");

    ErrorPage JSON = (status, message) -> HttpResponse.json(status, Map.of("error", message));
}
