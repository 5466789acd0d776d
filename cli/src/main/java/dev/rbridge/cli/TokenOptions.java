package dev.rbridge.cli;

import picocli.CommandLine.Option;

import java.nio.file.Path;

/**
 * {@code --token} and {@code --token-file}: the memservers' shared secret, for every command that takes it (a picocli
 * mixin); without either, the {@value Endpoints#TOKEN_ENV} environment variable ({@link Endpoints#token}). The words
 * here are those of the commands that present the token; memserver, which asks for it, words them in its help bundle.
 */
final class TokenOptions {
    @Option(names = "--token", paramLabel = "SECRET", description = "The memservers' shared secret (visible to other"
            + " users in ps: prefer --token-file or " + Endpoints.TOKEN_ENV + ").")
    String token;

    @Option(names = "--token-file", paramLabel = "FILE", description = "Read the secret from the first line of FILE."
            + " Without --token or --token-file, " + Endpoints.TOKEN_ENV + " is used when set.")
    Path tokenFile;

    /**
     * The token for a server (memserver, serve), null when none is given; a {@code --token} on its command line, which
     * stays in ps for as long as the server runs, is warned about in its log.
     *
     * @throws IllegalArgumentException naming what is wrong: both flags given, FILE unreadable or empty, a placeholder
     */
    String forServer() {
        String secret = Endpoints.token(token, tokenFile);
        Endpoints.warnIfOnCommandLine(token);
        return secret;
    }

    /**
     * The token for client tool {@code command} (ping, bench, mem, admin), null when none is given; a {@code --token}
     * on its command line is warned about in one line on stderr, whatever the log level.
     *
     * @throws IllegalArgumentException as {@link #forServer}
     */
    String forTool(String command) {
        Endpoints.warnToolIfOnCommandLine(command, token);
        return Endpoints.token(token, tokenFile);
    }
}
