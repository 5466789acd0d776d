package dev.rbridge.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import picocli.CommandLine;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A token given with {@code --token} shows in ps to every user of the host while the command runs: the client tools
 * warn about it on stderr as the servers do (whatever --log-level), say nothing when it comes from a file, and no
 * example in any command's help puts a token on the command line.
 */
@Timeout(120)
class TokenOnCommandLineTest {
    private static final String WARNING = "--token on the command line is visible to other users of this host";

    private static String stderr(Path dir, String... args) throws Exception {
        Path log = Files.createTempFile(dir, "cli", ".err");
        Process p = CliProcess.start(log, args);
        p.getInputStream().readAllBytes();
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), String.join(" ", args) + " did not end");
        return Files.readString(log);
    }

    @Test
    void theClientToolsWarnOnStderr() throws Exception {
        Path dir = Files.createTempDirectory("token-warning");
        Path file = Files.writeString(dir.resolve("token"), "0123456789abcdef0123456789abcdef\n");
        // Nothing listens on port 1: each tool fails to connect after reading its options.
        List<String[]> tools = List.of(
                new String[]{"ping", "--server", "127.0.0.1:1", "--timeout", "1"},
                new String[]{"mem", "list", "--server", "127.0.0.1:1", "--timeout", "1"},
                new String[]{"bench", "--server", "127.0.0.1:1", "--timeout", "1", "--test", "read-lat"},
                new String[]{"admin", "--bridge", "127.0.0.1:1", "--log-level", "error", "volumes"});
        for (String[] tool : tools) {
            List<String> withToken = new ArrayList<>(List.of(tool));
            withToken.addAll(List.of("--token", "s3cret-on-the-command-line"));
            String err = stderr(dir, withToken.toArray(String[]::new));
            assertTrue(err.contains(WARNING), String.join(" ", withToken) + ": no warning on stderr:\n" + err);
            assertTrue(err.contains("--token-file"), err);

            List<String> withFile = new ArrayList<>(List.of(tool));
            withFile.addAll(List.of("--token-file", file.toString()));
            String quiet = stderr(dir, withFile.toArray(String[]::new));
            assertFalse(quiet.contains(WARNING), String.join(" ", withFile) + ": warned:\n" + quiet);
        }
    }

    private static void examples(CommandLine c, String path, List<String> out) {
        StringWriter help = new StringWriter();
        c.usage(new PrintWriter(help));
        for (String line : help.toString().lines().toList()) {
            if (line.contains("--token ") || line.contains("--token=")) {
                out.add(path + ": " + line.strip());
            }
        }
        c.getSubcommands().forEach((name, sub) -> examples(sub, path + " " + name, out));
    }

    @Test
    void noExampleInAnyHelpPutsATokenOnTheCommandLine() {
        List<String> found = new ArrayList<>();
        Main.commandLine().getSubcommands().forEach((name, c) -> examples(c, name, found));
        List<String> inExamples = found.stream().filter(l -> l.contains("rbridge ")).toList();
        assertTrue(inExamples.isEmpty(), "examples with --token:\n" + String.join("\n", inExamples));
    }
}
