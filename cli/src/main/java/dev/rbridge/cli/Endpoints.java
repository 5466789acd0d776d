package dev.rbridge.cli;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;

/** Parsing shared by the remote-memory commands: addresses and tokens. */
final class Endpoints {
    private Endpoints() {}

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

    /**
     * Warns that a {@code --token} given on the command line shows in ps to every user of the host: the servers, which
     * stay in ps for days, in their log.
     */
    static void warnIfOnCommandLine(String token) {
        if (token != null) {
            org.slf4j.LoggerFactory.getLogger(Endpoints.class).warn(TOKEN_WARNING);
        }
    }

    /**
     * The same for a client tool (ping, bench, mem, admin): one line on stderr, whatever its --log-level, since it
     * is the user at the prompt who typed the token.
     */
    static void warnToolIfOnCommandLine(String command, String token) {
        if (token != null) {
            System.err.println(command + ": warning: " + TOKEN_WARNING);
        }
    }

    private static final String TOKEN_WARNING = "--token on the command line is visible to other users of this host"
            + " (ps, /proc): use --token-file FILE or the " + Endpoints.TOKEN_ENV + " environment variable";

    /** The environment variable a token may come from when neither --token nor --token-file is given. */
    static final String TOKEN_ENV = "RBRIDGE_TOKEN";

    /**
     * The token from {@code --token}, {@code --token-file}, or else the {@value #TOKEN_ENV} environment variable; null
     * when none.
     */
    static String token(String token, Path tokenFile) {
        return notAPlaceholder(readToken(token, tokenFile), tokenFile);
    }

    /** The placeholders deploy/ ships in place of a token start with this: one left in place is refused. */
    static final String PLACEHOLDER = "CHANGE-ME";

    private static String notAPlaceholder(String token, Path tokenFile) {
        if (token != null && token.startsWith(PLACEHOLDER)) {
            throw new IllegalArgumentException("the token" + (tokenFile != null ? " in " + tokenFile : "") + " is the"
                    + " example's placeholder, which anyone can read in rbridge's sources; make a random one:"
                    + " head -c 32 /dev/urandom | base64");
        }
        return token;
    }

    private static String readToken(String token, Path tokenFile) {
        if (token != null && tokenFile != null) {
            throw new IllegalArgumentException("give --token or --token-file, not both");
        }
        if (token != null) {
            return token;
        }
        if (tokenFile == null) {
            String env = System.getenv(TOKEN_ENV);
            return env == null || env.isBlank() ? null : env.strip();
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
