package dev.rbridge.cli.kernel;

import dev.rbridge.nbd.interop.PeerTool;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The project's {@code kmod-hooks/} folder and the helpers built from it (with gcc and make, into target/). */
final class KmodHooks {
    private static Path writeData;

    private KmodHooks() {}

    /** {@code kmod-hooks/}, found from the cli module (where Maven runs the tests) or from the project root. */
    static Path dir() {
        for (String candidate : List.of("../kmod-hooks", "kmod-hooks")) {
            Path p = Path.of(candidate);
            if (Files.isRegularFile(p.resolve("write_data.c"))) {
                return p.toAbsolutePath().normalize();
            }
        }
        throw new IllegalStateException("kmod-hooks/ not found from " + Path.of("").toAbsolutePath());
    }

    /**
     * Copies this JVM's runtime classpath (jars, and the modules' main class folders; no test classes) into
     * {@code dir/cp}, so that a guest can run {@code java -cp 'cp/*:cp/classes-*' dev.rbridge.cli.Main}: the
     * same code the tests run, without depending on the shaded jar (Maven packages it after the tests).
     * Returns the {@code -cp} value relative to {@code dir}.
     */
    static String copyClasspath(Path dir) throws IOException {
        Path cp = Files.createDirectories(dir.resolve("cp"));
        List<String> entries = new ArrayList<>(List.of("cp/*"));
        int n = 0;
        for (String e : System.getProperty("java.class.path").split(File.pathSeparator)) {
            Path p = Path.of(e);
            if (Files.isRegularFile(p) && e.endsWith(".jar")) {
                Files.copy(p, cp.resolve(p.getFileName()), StandardCopyOption.REPLACE_EXISTING);
            } else if (Files.isDirectory(p) && p.getFileName().toString().equals("classes")) {
                String name = "classes-" + (n++);
                Path to = cp.resolve(name);
                try (var walk = Files.walk(p)) {
                    for (Path f : (Iterable<Path>) walk::iterator) {
                        Path t = to.resolve(p.relativize(f).toString());
                        if (Files.isDirectory(f)) {
                            Files.createDirectories(t);
                        } else {
                            Files.copy(f, t, StandardCopyOption.REPLACE_EXISTING);
                        }
                    }
                }
                entries.add("cp/" + name);
            }
        }
        return String.join(":", entries);
    }

    /** Builds the helpers ({@code write_data}, {@code swap_hog}) into target/kmod-hooks once; returns write_data. */
    static synchronized Path writeData() {
        if (writeData == null) {
            PeerTool.require("gcc", "gcc");
            PeerTool.require("make", "make");
            Path out = Path.of("target", "kmod-hooks").toAbsolutePath();
            PeerTool.Result r = PeerTool.run(120, List.of("make", "-C", dir().toString(), "O=" + out));
            assertEquals(0, r.exitCode(), "building write_data and swap_hog failed:\n" + r.output());
            writeData = out.resolve("write_data");
        }
        return writeData;
    }

    /** {@code swap_hog}, built beside {@link #writeData()}. */
    static Path swapHog() {
        return writeData().resolveSibling("swap_hog");
    }
}
