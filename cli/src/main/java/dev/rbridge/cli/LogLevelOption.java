package dev.rbridge.cli;

import picocli.CommandLine.Option;

/**
 * {@code --log-level}, declared once for every command that takes it; the variant a command mixes in is its default:
 * {@link Server} or {@link Tool}. {@link Main} configures slf4j-simple from the raw arguments before picocli runs, as
 * slf4j-simple reads its settings once; this option makes the flag legal and shows it in the help.
 */
class LogLevelOption {
    @Option(names = "--log-level", paramLabel = "LEVEL",
            description = "error, warn, info, debug or trace. Default ${DEFAULT-VALUE}.")
    String level;

    private LogLevelOption(String level) {
        this.level = level;
    }

    /** serve, demo, memserver, attach. */
    static final class Server extends LogLevelOption {
        Server() {
            super(Defaults.SERVER_LOG_LEVEL);
        }
    }

    /** ping, bench, mem, admin. */
    static final class Tool extends LogLevelOption {
        Tool() {
            super(Defaults.TOOL_LOG_LEVEL);
        }
    }
}
