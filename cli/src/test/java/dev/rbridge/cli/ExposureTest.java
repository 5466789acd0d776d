package dev.rbridge.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * No silent insecurity: a memserver without a token, or an NBD server that does not authenticate its clients, on an
 * address other hosts reach, refuses to start with one sentence naming the flag to add; loopback needs neither, and
 * {@code --insecure} says it is meant. A token on the command line is warned about.
 */
@Timeout(120)
class ExposureTest {
    private record Result(int code, String err) {
    }

    /** Runs a command that must refuse, or (when it starts) is stopped once it printed its first line. */
    private static Result run(String... args) throws Exception {
        Path err = Files.createTempFile("exposure", ".err");
        Process p = CliProcess.start(err, args);
        try {
            String first = new java.io.BufferedReader(new java.io.InputStreamReader(p.getInputStream(),
                    StandardCharsets.UTF_8)).readLine();
            if (first != null) { // it started: that is the answer
                p.destroy();
                assertTrue(p.waitFor(30, TimeUnit.SECONDS));
                return new Result(0, Files.readString(err));
            }
            assertTrue(p.waitFor(30, TimeUnit.SECONDS));
            return new Result(p.exitValue(), Files.readString(err));
        } finally {
            p.destroyForcibly();
        }
    }

    @Test
    void aMemserverWithoutATokenOnAnAddressOthersReachRefusesToStart() throws Exception {
        Result open = run("memserver", "--listen", "0.0.0.0:0", "--capacity", "64M", "--admin", "none",
                "--metrics", "none");
        assertEquals(2, open.code(), open.err());
        assertTrue(open.err().contains("add --token-file FILE") && open.err().contains("--insecure"), open.err());

        assertEquals(0, run("memserver", "--listen", "0.0.0.0:0", "--capacity", "64M", "--admin", "none",
                "--metrics", "none", "--insecure").code());
        assertEquals(0, run("memserver", "--listen", "127.0.0.1:0", "--capacity", "64M", "--admin", "none",
                "--metrics", "none").code());
    }

    @Test
    void aTokenOnTheCommandLineIsWarnedAbout() throws Exception {
        Result r = run("memserver", "--listen", "0.0.0.0:0", "--capacity", "64M", "--admin", "none",
                "--metrics", "none", "--token", "s3cret-s3cret");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.err().contains("--token on the command line is visible to other users"), r.err());
        assertFalse(r.err().contains("s3cret-s3cret"), "the warning repeats the token:\n" + r.err());
    }

    @Test
    void nbdOnAnAddressOthersReachNeedsClientAuthenticationOrInsecure() throws Exception {
        Result open = run("demo", "--listen", "0.0.0.0:0", "--size", "64M");
        assertEquals(2, open.code(), open.err());
        assertTrue(open.err().contains("add --tls require with --tls-psk FILE") && open.err().contains("--insecure"),
                open.err());

        Path keys = Files.createTempFile("exposure", ".psk");
        Files.writeString(keys, "alice:" + "ab".repeat(32) + "\n");
        assertEquals(0, run("demo", "--listen", "0.0.0.0:0", "--size", "64M", "--tls", "require", "--tls-psk",
                keys.toString()).code());
        assertEquals(0, run("demo", "--listen", "0.0.0.0:0", "--size", "64M", "--insecure").code());
        assertEquals(0, run("demo", "--listen", "127.0.0.1:0", "--size", "64M").code());
    }

    @Test
    void adminNeverSendsTheTokenOffLoopback() throws Exception {
        Path token = Files.createTempFile("exposure", ".token");
        Files.writeString(token, "s3cret-s3cret\n");
        Result r = run("admin", "--memserver", "192.0.2.7:7472", "--token-file", token.toString(), "clients");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("would cross the network in clear") && r.err().contains("ssh -L"), r.err());
    }
}
