package dev.rbridge.cli;

import org.junit.jupiter.api.Test;
import picocli.CommandLine;
import picocli.CommandLine.Model.OptionSpec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

/**
 * The level a command logs at is the default its {@code --help} shows: slf4j-simple is configured from the raw
 * arguments before picocli parses them, so the two could drift apart (tools said "default warn" and ran at info).
 */
class LogLevelDefaultTest {
    @Test
    void everyCommandLogsAtTheLevelItsHelpNames() {
        CommandLine main = Main.commandLine();
        int checked = 0;
        for (var e : main.getSubcommands().entrySet()) {
            OptionSpec option = e.getValue().getCommandSpec().findOption("--log-level");
            if (option == null) {
                continue;
            }
            String name = e.getKey();
            String helpSays = option.defaultValue() != null ? option.defaultValue() : (String) option.initialValue();
            assertEquals(helpSays, Main.logLevel(new String[]{name}), name);
            assertEquals(helpSays, Main.logLevel(new String[]{name, "--server", "h:1", "x"}), name);
            checked++;
        }
        assertEquals(Defaults.TOOL_LOG_LEVEL, Main.logLevel(new String[]{"ping", "--server", "h:1"}));
        assertEquals(Defaults.SERVER_LOG_LEVEL, Main.logLevel(new String[]{"serve"}));
        assertEquals(Defaults.TOOL_LOG_LEVEL, Main.logLevel(new String[]{"admin", "--bridge", "h:1", "volumes"}));
        assertFalse(checked < 7, "commands with --log-level: " + checked);
    }

    @Test
    void anExplicitLevelWins() {
        assertEquals("debug", Main.logLevel(new String[]{"ping", "--log-level", "debug"}));
        assertEquals("error", Main.logLevel(new String[]{"serve", "--log-level=error"}));
        assertEquals("trace", Main.logLevel(new String[]{"--log-level", "trace", "admin"}));
    }

    @Test
    void withoutACommandTheServersLevelApplies() {
        assertEquals(Defaults.SERVER_LOG_LEVEL, Main.logLevel(new String[0]));
        assertEquals(Defaults.SERVER_LOG_LEVEL, Main.logLevel(new String[]{"--help"}));
        assertEquals(Defaults.SERVER_LOG_LEVEL, Main.logLevel(new String[]{"no-such-command"}));
    }
}
