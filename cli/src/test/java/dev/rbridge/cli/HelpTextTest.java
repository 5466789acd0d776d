package dev.rbridge.cli;

import org.junit.jupiter.api.Test;
import picocli.CommandLine;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Help wraps once, to its width: no prose line of any command's help is longer than the width, none is broken into
 * a ragged short line followed by a continuation (the old hand-wrapping at another width), and examples come whole.
 */
class HelpTextTest {
    private static String help(CommandLine c, int width) {
        c.getCommandSpec().usageMessage().width(width).autoWidth(false);
        StringWriter out = new StringWriter();
        c.usage(new PrintWriter(out));
        return out.toString();
    }

    @Test
    void everyCommandsHelpIsWrappedOnceAndExamplesStayWhole() {
        CommandLine root = Main.commandLine();
        for (int width : new int[]{80, 120}) {
            for (Map.Entry<String, CommandLine> e : root.getSubcommands().entrySet()) {
                String text = help(e.getValue(), width);
                for (String line : text.lines().toList()) {
                    assertTrue(line.length() <= width || line.startsWith("  "), e.getKey() + " at " + width
                            + ": a line of " + line.length() + " characters:\n" + line);
                }
            }
        }
        String serve = help(root.getSubcommands().get("serve"), 80);
        assertTrue(serve.contains("  rbridge serve --memserver 10.0.0.5:" + Defaults.MEMSERVER_PORT
                + " --memserver 10.0.0.6:" + Defaults.MEMSERVER_PORT + " --token-file /etc/rbridge/token \\"), serve);
        // The description's first paragraph fills its lines: the second line starts where the first word that did
        // not fit would, not after a short hand-broken line.
        String[] lines = serve.lines().toArray(String[]::new);
        for (int i = 0; i + 1 < lines.length; i++) {
            if (lines[i].startsWith("A volume is cut into slabs")) {
                String next = lines[i + 1].split(" ")[0];
                assertTrue(lines[i].length() + 1 + next.length() > 80, "ragged:\n" + lines[i] + "\n" + lines[i + 1]);
            }
        }
    }

    /** A shared option keeps its command's words: admin's token is a memserver's or, with --bridge, its memservers'. */
    @Test
    void adminWordsTheSharedTokenOptionForItsBridgeMode() {
        String admin = help(Main.commandLine().getSubcommands().get("admin"), 200);
        assertTrue(admin.contains("with --bridge: the token of the bridge's memservers"), admin);
        String ping = help(Main.commandLine().getSubcommands().get("ping"), 200);
        assertTrue(ping.contains("The memservers' shared secret"), ping);
    }
}
