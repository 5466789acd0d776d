package dev.rbridge.nbd.interop;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.fail;

/**
 * Runs a real NBD client (a Debian-packaged tool or one of the scripts in {@code src/test/resources/interop}) with a
 * time limit. A missing tool fails the test with the package to install: the interop tests never skip silently.
 */
public final class PeerTool {
    private PeerTool() {}

    private static final String SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin";

    public record Result(int exitCode, String output) {
    }

    /** The interop scripts folder, found from the nbd module or from a sibling module. */
    public static Path scripts() {
        for (String candidate : List.of("src/test/resources/interop", "../nbd/src/test/resources/interop")) {
            Path p = Path.of(candidate);
            if (Files.isDirectory(p)) {
                return p.toAbsolutePath().normalize();
            }
        }
        throw new IllegalStateException("interop scripts not found from " + Path.of("").toAbsolutePath());
    }

    /** The tool's path, searching the system folders first; null if it is not installed. */
    static Path which(String tool) {
        for (String dir : (SYSTEM_PATH + ":" + System.getenv().getOrDefault("PATH", "")).split(":")) {
            Path p = Path.of(dir, tool);
            if (!dir.isEmpty() && Files.isExecutable(p)) {
                return p;
            }
        }
        return null;
    }

    /** Fails the test unless {@code tool} is installed, naming the Debian package that provides it. */
    public static void require(String tool, String debianPackage) {
        if (which(tool) != null) {
            return;
        }
        fail(tool + " is not installed; the interop tests drive it as a real NBD peer. Install it with: "
                + "apt-get install " + debianPackage + " (./test does this when run as root)");
    }

    /** Runs a command; returns its exit code and merged output. */
    public static Result run(long timeoutSeconds, List<String> command) {
        List<String> argv = new ArrayList<>(command);
        Path exe = argv.get(0).contains("/") ? null : which(argv.get(0));
        if (exe != null) {
            argv.set(0, exe.toString()); // ProcessBuilder looks programs up on the parent's PATH, not the child's
        }
        ProcessBuilder pb = new ProcessBuilder(argv).redirectErrorStream(true);
        // Debian's python3 carries python3-libnbd; a python earlier on PATH (pyenv, venv) would not.
        pb.environment().put("PATH", SYSTEM_PATH + ":" + System.getenv().getOrDefault("PATH", ""));
        Path log;
        try {
            log = Files.createTempFile("peer", ".log");
            pb.redirectOutput(log.toFile());
            Process p = pb.start();
            if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
                p.descendants().forEach(ProcessHandle::destroyForcibly);
                p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                String out = Files.readString(log, StandardCharsets.UTF_8);
                fail(String.join(" ", command) + " did not finish within " + timeoutSeconds + " s; output:\n" + out);
            }
            String out = Files.readString(log, StandardCharsets.UTF_8);
            Files.deleteIfExists(log);
            return new Result(p.exitValue(), out);
        } catch (IOException e) {
            throw new IllegalStateException("could not run " + command, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted running " + command, e);
        }
    }

    /** Runs a command and fails the test, with its output, unless it exits 0. Returns the output. */
    public static String check(long timeoutSeconds, String... command) {
        Result r = run(timeoutSeconds, List.of(command));
        if (r.exitCode() != 0) {
            fail(String.join(" ", command) + " exited " + r.exitCode() + "; output:\n" + r.output());
        }
        return r.output();
    }

    /** Runs one of the interop scripts with its interpreter (resource copies lose the executable bit). */
    public static String script(long timeoutSeconds, String name, String... args) {
        List<String> command = new ArrayList<>();
        command.add(name.endsWith(".py") ? "python3" : "bash");
        command.add(scripts().resolve(name).toString());
        command.addAll(List.of(args));
        return check(timeoutSeconds, command.toArray(String[]::new));
    }
}
