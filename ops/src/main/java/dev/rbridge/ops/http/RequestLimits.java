package dev.rbridge.ops.http;

/**
 * How much of a request the {@link HttpRequestDecoder} takes before it refuses it; {@link OpsHttpConfig} holds a
 * server's and checks that they can carry a request at all.
 *
 * @param requestLine bytes of the request line with its line end (and any empty lines before it)
 * @param headerBytes bytes of all header lines with their line ends and the empty line that ends them
 * @param headers     header lines
 * @param body        bytes of a body ({@code Content-Length})
 */
public record RequestLimits(int requestLine, int headerBytes, int headers, int body) {
}
