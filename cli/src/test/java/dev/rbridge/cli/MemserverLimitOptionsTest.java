package dev.rbridge.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code rbridge memserver}'s limits: documented in --help, and a bad value named before anything starts. */
@Timeout(120)
class MemserverLimitOptionsTest {
    private record Result(int code, String out, String err) {
    }

    private static Result memserver(String... args) throws Exception {
        Path err = Files.createTempFile("memserver", ".err");
        String[] all = new String[args.length + 1];
        all[0] = "memserver";
        System.arraycopy(args, 0, all, 1, args.length);
        Process p = CliProcess.start(err, all);
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        return new Result(p.exitValue(), out, Files.readString(err));
    }

    @Test
    void helpNamesEveryLimitWithItsDefault() throws Exception {
        Result r = memserver("--help");
        assertEquals(0, r.code(), r.err());
        for (String option : new String[]{"--max-connections=N", "--max-connections-per-peer=N",
                "--max-unauthenticated=N", "--max-regions=N"}) {
            assertTrue(r.out().contains(option), option + " missing from:\n" + r.out());
        }
        assertTrue(r.out().contains("Default 256") && r.out().contains("Default 32768"), r.out());
    }

    @Test
    void aLimitOutOfRangeIsAUsageErrorNamingTheOption() throws Exception {
        Result regions = memserver("--capacity", "64M", "--listen", "127.0.0.1:0", "--admin", "none", "--metrics",
                "none", "--max-regions", "0");
        assertEquals(2, regions.code(), regions.err());
        assertTrue(regions.err().contains("--max-regions must be from 1 to 38000"), regions.err());
        Result perPeer = memserver("--capacity", "64M", "--listen", "127.0.0.1:0", "--admin", "none", "--metrics",
                "none", "--max-connections", "10", "--max-connections-per-peer", "20");
        assertEquals(2, perPeer.code(), perPeer.err());
        assertTrue(perPeer.err().contains("--max-connections-per-peer must be from 1 to --max-connections (10)"),
                perPeer.err());
    }
}
