package dev.rbridge.nbd.server;

import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.URLEncoder;
import java.net.UnixDomainSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

/** Where the server listens: a TCP host and port, or a Unix socket path. */
public sealed interface ListenAddress {

    SocketAddress socketAddress();

    /** The NBD URI a client uses to reach {@code export} here ({@code nbd://} or {@code nbd+unix://}). */
    String uri(String export);

    record Tcp(String host, int port) implements ListenAddress {
        public Tcp {
            if (port < 0 || port > 65535) {
                throw new IllegalArgumentException("port out of range: " + port);
            }
        }

        public SocketAddress socketAddress() {
            return new InetSocketAddress(host, port);
        }

        public String uri(String export) {
            String h = host.contains(":") ? "[" + host + "]" : host;
            return "nbd://" + h + ":" + port + "/" + encode(export);
        }

        @Override
        public String toString() {
            return host.contains(":") ? "[" + host + "]:" + port : host + ":" + port;
        }
    }

    record Unix(Path path) implements ListenAddress {
        public SocketAddress socketAddress() {
            return UnixDomainSocketAddress.of(path);
        }

        public String uri(String export) {
            return "nbd+unix:///" + encode(export) + "?socket=" + path.toAbsolutePath();
        }

        @Override
        public String toString() {
            return "unix:" + path;
        }
    }

    /** Parses {@code HOST:PORT}, {@code [IPV6]:PORT} or {@code :PORT} (all interfaces). */
    static Tcp parseTcp(String text) {
        int colon = text.lastIndexOf(':');
        if (colon < 0) {
            throw new IllegalArgumentException("expected HOST:PORT, got '" + text + "'");
        }
        String host = text.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        if (host.isEmpty()) {
            host = "0.0.0.0";
        }
        int port;
        try {
            port = Integer.parseInt(text.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("port in '" + text + "' is not a number");
        }
        return new Tcp(host, port);
    }

    private static String encode(String export) {
        return URLEncoder.encode(export, StandardCharsets.UTF_8).replace("+", "%20");
    }
}
