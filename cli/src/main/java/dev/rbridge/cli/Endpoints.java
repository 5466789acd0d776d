package dev.rbridge.cli;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;

/** Parsing shared by the remote-memory commands: addresses and tokens. */
final class Endpoints {
    private Endpoints() {
    }

    /** {@code HOST:PORT}, {@code [IPV6]:PORT}, or {@code HOST} with the given default port. */
    static InetSocketAddress parse(String text, int defaultPort) {
        String host = text;
        int port = defaultPort;
        int colon = text.lastIndexOf(':');
        if (colon >= 0 && text.indexOf(']') < colon) {
            host = text.substring(0, colon);
            try {
                port = Integer.parseInt(text.substring(colon + 1));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("port in '" + text + "' is not a number");
            }
        }
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        if (port < 0 || port > 65535) {
            throw new IllegalArgumentException("port out of range in '" + text + "'");
        }
        return new InetSocketAddress(host.isEmpty() ? "0.0.0.0" : host, port);
    }

    /** The token from {@code --token} or the first line of {@code --token-file}; null when neither is given. */
    static String token(String token, Path tokenFile) {
        if (token != null && tokenFile != null) {
            throw new IllegalArgumentException("give --token or --token-file, not both");
        }
        if (tokenFile == null) {
            return token;
        }
        try {
            String t = Files.readAllLines(tokenFile).stream().findFirst().orElse("").trim();
            if (t.isEmpty()) {
                throw new IllegalArgumentException("token file " + tokenFile + " is empty");
            }
            return t;
        } catch (IOException e) {
            throw new IllegalArgumentException("cannot read token file " + tokenFile + ": " + e.getMessage());
        }
    }
}
