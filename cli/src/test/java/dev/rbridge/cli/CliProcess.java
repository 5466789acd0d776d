package dev.rbridge.cli;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/** Runs {@code rbridge ARGS} as its own JVM on the test classpath, stderr to a log file. */
public final class CliProcess {
    private CliProcess() {}

    public static Process start(Path log, String... args) throws IOException {
        return start(log, List.of(), args);
    }

    /** As {@link #start(Path, String...)}, the JVM started through {@code prefix} (say {@code setpriv ... --}). */
    public static Process start(Path log, List<String> prefix, String... args) throws IOException {
        List<String> cmd = new ArrayList<>(prefix);
        cmd.addAll(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED",
                "-cp", System.getProperty("java.class.path"),
                Main.class.getName()));
        cmd.addAll(List.of(args));
        return new ProcessBuilder(cmd).redirectError(log.toFile()).start();
    }
}
