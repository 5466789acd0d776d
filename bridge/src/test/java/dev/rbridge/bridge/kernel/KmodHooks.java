package dev.rbridge.bridge.kernel;

import dev.rbridge.nbd.interop.PeerTool;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The project's {@code kmod-hooks/} folder and the helpers built from it (with gcc and make, into target/). */
final class KmodHooks {
    private static Path writeData;

    private KmodHooks() {
    }

    /** {@code kmod-hooks/}, found from the bridge module (where Maven runs the tests) or from the project root. */
    static Path dir() {
        for (String candidate : List.of("../kmod-hooks", "kmod-hooks")) {
            Path p = Path.of(candidate);
            if (Files.isRegularFile(p.resolve("write_data.c"))) {
                return p.toAbsolutePath().normalize();
            }
        }
        throw new IllegalStateException("kmod-hooks/ not found from " + Path.of("").toAbsolutePath());
    }

    /** Builds {@code write_data} into target/kmod-hooks once per JVM and returns its path. */
    static synchronized Path writeData() {
        if (writeData == null) {
            PeerTool.require("gcc", "gcc");
            PeerTool.require("make", "make");
            Path out = Path.of("target", "kmod-hooks").toAbsolutePath();
            PeerTool.Result r = PeerTool.run(120, List.of("make", "-C", dir().toString(), "O=" + out));
            assertEquals(0, r.exitCode(), "building write_data failed:\n" + r.output());
            writeData = out.resolve("write_data");
        }
        return writeData;
    }
}
