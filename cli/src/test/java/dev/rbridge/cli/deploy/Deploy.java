package dev.rbridge.cli.deploy;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** What the deploy/ tests share: the repository's folders, commands with a time limit, free ports, HTTP probes. */
final class Deploy {
    private Deploy() {
    }

    static final Path ROOT = Path.of(System.getProperty("basedir", "."), "..").toAbsolutePath().normalize();
    static final Path DEPLOY = ROOT.resolve("deploy");
    /** The shaded jar of this build: the deploy tests run in the package phase, after the shade plugin made it. */
    static final Path JAR = ROOT.resolve("cli/target/rbridge.jar");
    private static final String SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin";

    record Result(int exitCode, String output) {
    }

    /** Runs a command (merged output) with extra environment; fails the test if it outlives the limit. */
    static Result run(long timeoutSeconds, Map<String, String> env, List<String> command) {
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true);
        pb.environment().put("PATH", SYSTEM_PATH + ":" + System.getenv().getOrDefault("PATH", ""));
        pb.environment().putAll(env);
        try {
            Path log = Files.createTempFile("deploy", ".log");
            pb.redirectOutput(log.toFile());
            Process p = pb.start();
            if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
                p.descendants().forEach(ProcessHandle::destroyForcibly);
                p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                fail(String.join(" ", command) + " did not finish within " + timeoutSeconds + " s; output:\n"
                        + Files.readString(log));
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

    static Result run(long timeoutSeconds, String... command) {
        return run(timeoutSeconds, Map.of(), List.of(command));
    }

    /** Runs a command and fails the test with its output unless it exits 0; returns the output. */
    static String check(long timeoutSeconds, String... command) {
        Result r = run(timeoutSeconds, command);
        if (r.exitCode() != 0) {
            fail(String.join(" ", command) + " exited " + r.exitCode() + "; output:\n" + r.output());
        }
        return r.output();
    }

    /** Fails unless {@code tool} is on the system path, naming the Debian package that has it. */
    static void require(String tool, String debianPackage) {
        for (String dir : (SYSTEM_PATH + ":" + System.getenv().getOrDefault("PATH", "")).split(":")) {
            if (!dir.isEmpty() && Files.isExecutable(Path.of(dir, tool))) {
                return;
            }
        }
        fail(tool + " is not installed; install it with: apt-get install " + debianPackage
                + " (dev/test-packages.txt lists it; ./test installs that list when run as root)");
    }

    static void requireRoot(String why) {
        if (!"0".equals(check(10, "id", "-u").strip())) {
            fail("this test needs root: " + why);
        }
    }

    static void requireJar() {
        if (!Files.isRegularFile(JAR)) {
            fail(JAR + " is missing: the deploy tests run in the package phase after the shade plugin; run them with "
                    + "./mvnw verify (or package), not test");
        }
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    static String sha256(Path file) throws IOException {
        try (var in = Files.newInputStream(file)) {
            MessageDigest md = MessageDigest.getInstance("SHA-256");
            byte[] buf = new byte[1 << 20];
            for (int n; (n = in.read(buf)) > 0; ) {
                md.update(buf, 0, n);
            }
            return HexFormat.of().formatHex(md.digest());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** GETs http://ADDRESS/PATH until it answers {@code status} or the deadline passes; returns the last body. */
    static String awaitHttp(String address, String path, int status, Duration within, Process watched, Path log)
            throws Exception {
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
        long deadline = System.nanoTime() + within.toNanos();
        String last = "no answer";
        while (System.nanoTime() < deadline) {
            if (watched != null && !watched.isAlive()) {
                fail("the process serving " + address + " exited " + watched.exitValue() + " before " + path
                        + " answered " + status + "; its output:\n" + Files.readString(log));
            }
            try {
                HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://" + address + path))
                        .timeout(Duration.ofSeconds(2)).build(), HttpResponse.BodyHandlers.ofString());
                last = r.statusCode() + " " + r.body();
                if (r.statusCode() == status) {
                    return r.body();
                }
            } catch (IOException e) {
                last = e.toString();
            }
            Thread.sleep(200);
        }
        fail("http://" + address + path + " did not answer " + status + " within " + within.toSeconds() + " s (last: "
                + last + ")" + (log == null ? "" : "; output:\n" + Files.readString(log)));
        return null;
    }

    /** Stops a process tree: SIGTERM, then SIGKILL after {@code grace}. Returns true if it ended on SIGTERM. */
    static boolean stop(Process p, Duration grace) throws InterruptedException {
        if (p == null || !p.isAlive()) {
            return true;
        }
        p.destroy();
        if (p.waitFor(grace.toMillis(), TimeUnit.MILLISECONDS)) {
            return true;
        }
        p.descendants().forEach(ProcessHandle::destroyForcibly);
        p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        return false;
    }
}
