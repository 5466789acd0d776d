package dev.rbridge.cli;

import dev.rbridge.memory.NumaNodes;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code rbridge memserver --numa-node}: a node the host lacks stops the start, and the choice is logged. */
@Timeout(120)
class MemserverNumaOptionTest {
    private static final String[] BASE = {"memserver", "--capacity", "64M", "--listen", "127.0.0.1:0", "--admin",
            "none", "--metrics", "none"};

    private static String[] with(String... more) {
        String[] all = new String[BASE.length + more.length];
        System.arraycopy(BASE, 0, all, 0, BASE.length);
        System.arraycopy(more, 0, all, BASE.length, more.length);
        return all;
    }

    @Test
    void aNodeTheHostLacksOrAMalformedOneIsAUsageError() throws Exception {
        Assumptions.assumeTrue(Files.exists(Path.of("/sys/devices/system/node/has_memory")), "a kernel without NUMA");
        Path err = Files.createTempFile("memserver", ".err");
        for (String[] c : new String[][]{{"63", "--numa-node 63: this host has memory on nodes"},
                {"banana", "--numa-node takes auto, off or a node number from 0 to 1023, not 'banana'"}}) {
            Process p = CliProcess.start(err, with("--numa-node", c[0]));
            p.getInputStream().readAllBytes();
            assertTrue(p.waitFor(30, TimeUnit.SECONDS));
            String log = Files.readString(err);
            assertEquals(2, p.exitValue(), log);
            assertTrue(log.contains(c[1]), log);
        }
    }

    @Test
    void theChoiceIsLogged() throws Exception {
        String node = Integer.toString(NumaNodes.firstAllowed());
        for (String[] c : new String[][]{{node, "NUMA placement: region memory from node " + node + " (--numa-node "
                + node + ")"},
                {"auto", "NUMA placement: none (auto: "}}) {
            Path err = Files.createTempFile("memserver", ".err");
            Process p = CliProcess.start(err, with("--numa-node", c[0], "--log-level", "info"));
            try {
                String line = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))
                        .readLine();
                assertTrue(line != null && line.contains("lending 64MiB"), line + "\n" + Files.readString(err));
                String log = Files.readString(err);
                assertTrue(log.contains(c[1]), log);
            } finally {
                p.destroy();
                p.waitFor(20, TimeUnit.SECONDS);
            }
        }
    }
}
