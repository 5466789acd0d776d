package dev.rbridge.cli;

import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Every failure a user can cause ends in one line that names the fix, never a stack trace: a port that is taken, an
 * IPv6 admin address, admin pointed at a port that is not an admin interface, no token for a memserver that needs
 * one, a usage mistake (its line and where the help is, not the whole usage).
 */
@Timeout(180)
@Tag("interop")
class OneLineErrorsTest {
    private static final Pattern LENDING = Pattern.compile("lending \\S+ at (\\S+) admin (\\S+)");

    private record Result(int code, String err) {
        /** At most {@code lines} lines, no stack frame, and every word given. */
        void says(int lines, String... words) {
            assertFalse(err.contains("\tat ") || err.contains("Exception:"), "a stack trace:\n" + err);
            long n = err.lines().filter(l -> !l.contains("[INFO]") && !l.contains("[WARN]")).count();
            assertTrue(n <= lines, n + " lines:\n" + err);
            for (String w : words) {
                assertTrue(err.contains(w), "'" + w + "' missing:\n" + err);
            }
        }
    }

    private static Result run(Path dir, String... args) throws Exception {
        Path log = Files.createTempFile(dir, "cli", ".err");
        Process p = CliProcess.start(log, args);
        p.getInputStream().readAllBytes();
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), String.join(" ", args) + " did not end");
        return new Result(p.exitValue(), Files.readString(log));
    }

    @Test
    void mistakesEndInOneLineThatNamesTheFix() throws Exception {
        Path dir = Files.createTempDirectory("one-line");
        Path token = Files.writeString(dir.resolve("token"), "0123456789abcdef0123456789abcdef\n");
        Process m = CliProcess.start(dir.resolve("memserver.log"), "memserver", "--listen", "127.0.0.1:0",
                "--admin", "127.0.0.1:0", "--metrics", "none", "--capacity", "64M", "--token-file", token.toString());
        try {
            String line = new BufferedReader(new InputStreamReader(m.getInputStream(), StandardCharsets.UTF_8))
                    .readLine();
            assertTrue(line != null, Files.readString(dir.resolve("memserver.log")));
            Matcher at = LENDING.matcher(line);
            assertTrue(at.find(), line);
            String data = at.group(1);
            String admin = at.group(2).replaceFirst("/$", "");

            Result taken = run(dir, "memserver", "--listen", data, "--admin", "none", "--metrics", "none",
                    "--capacity", "64M", "--token-file", token.toString());
            assertEquals(1, taken.code(), taken.err());
            taken.says(1, "memserver: cannot listen on " + data, "in use", "--listen");

            Result noToken = run(dir, "ping", "--server", data);
            assertEquals(1, noToken.code(), noToken.err());
            noToken.says(1, "needs a token and none was given", "--token-file");

            Result notHttp = run(dir, "admin", "--memserver", data, "--token-file", token.toString(), "clients");
            assertEquals(1, notHttp.code(), notHttp.err());
            notHttp.says(1, "does not answer HTTP", "admin port");

            Result v6 = run(dir, "admin", "--bridge", "[::1]:1", "volumes");
            assertEquals(1, v6.code(), v6.err());
            v6.says(1, "admin: cannot reach the bridge's admin interface at [::1]:1");

            Result works = run(dir, "admin", "--memserver", admin, "--token-file", token.toString(), "clients");
            assertEquals(0, works.code(), works.err());

            Path placeholder = Files.writeString(dir.resolve("placeholder"), "CHANGE-ME-to-a-long-random-secret\n");
            Result example = run(dir, "memserver", "--listen", "127.0.0.1:0", "--admin", "none", "--metrics", "none",
                    "--capacity", "64M", "--token-file", placeholder.toString());
            assertTrue(example.code() != 0, example.err());
            example.says(3, "placeholder", "head -c 32 /dev/urandom");

            Result growWhat = run(dir, "admin", "--bridge", "127.0.0.1:1", "volumes", "48G");
            assertEquals(2, growWhat.code(), growWhat.err());
            growWhat.says(3, "unexpected argument '48G' for volumes");
            Result waitWhat = run(dir, "admin", "--memserver", admin, "--token-file", token.toString(), "clients",
                    "--wait");
            assertEquals(2, waitWhat.code(), waitWhat.err());
            waitWhat.says(3, "--wait applies to drain");

            Result usage = run(dir, "ping", "--server", data, "--count", "many");
            assertEquals(2, usage.code(), usage.err());
            usage.says(3, "--count", "Try 'rbridge ping --help'");
            assertFalse(usage.err().contains("Usage:"), usage.err());
        } finally {
            m.destroyForcibly();
        }
    }
}
