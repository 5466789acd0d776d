package dev.rbridge.cli.deploy;

import static org.junit.jupiter.api.Assertions.fail;

import dev.rbridge.nbd.interop.PeerTool;
import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.HexFormat;
import java.util.concurrent.TimeUnit;

/**
 * What the deploy/ tests share: the repository's folders, free ports, HTTP probes. Commands run with a time limit
 * through the nbd test-jar's {@link PeerTool}.
 */
final class Deploy {
    private Deploy() {}

    static final Path ROOT = Path.of(System.getProperty("basedir", "."), "..").toAbsolutePath().normalize();
    static final Path DEPLOY = ROOT.resolve("deploy");
    /** The shaded jar of this build: the deploy tests run in the package phase, after the shade plugin made it. */
    static final Path JAR = ROOT.resolve("cli/target/rbridge.jar");
    private static final String SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin";

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
        if (!"0".equals(PeerTool.check(10, "id", "-u").strip())) {
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
            for (int n; (n = in.read(buf)) > 0;) {
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
