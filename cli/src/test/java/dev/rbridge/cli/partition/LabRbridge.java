package dev.rbridge.cli.partition;

import dev.rbridge.cli.Main;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One {@code rbridge} JVM (a memserver or a bridge) in a {@link PartitionLab} node, on the test classpath, as
 * {@code ServeCluster} starts them on loopback: stdout to {@code LABEL.out}, stderr (the log) to {@code LABEL.log}
 * in the lab's log folder. The lab kills it on close; {@link #terminate} stops it gracefully first.
 *
 * <p>A memserver listens on its node's lab address; a bridge serves NBD on its node's lab address (so clients in
 * other nodes reach it through the lab, and a cut between them is a cut). Both have their admin interface on their
 * node's loopback, which no cut touches: an operator on that host, read with a {@link NetProbe} in that node
 * ({@link LabAdmin}).
 */
public final class LabRbridge {
    private static final Pattern LENDING = Pattern.compile(
            "rbridge memserver: lending \\S+ at (\\S+:\\d+) admin (\\S+:\\d+)");
    private static final Pattern SERVING = Pattern.compile("rbridge serve: serving (nbd://\\S+)");
    private static final Pattern ADMIN = Pattern.compile("rbridge serve: admin (http://[^/\\s]+/)");
    private static final Duration START_TIMEOUT = Duration.ofSeconds(60);

    private final String label;
    private final String node;
    private final Process process;
    private final Path out;
    private final Path log;
    private String address;
    private String adminUrl;

    private LabRbridge(String label, String node, Process process, Path out, Path log) {
        this.label = label;
        this.node = node;
        this.process = process;
        this.out = out;
        this.log = log;
    }

    /**
     * {@code rbridge memserver --listen NODE_ADDRESS:0 --capacity CAPACITY} (admin on the node's loopback, no metrics,
     * tcp) in {@code node}; returns once it prints where it lends.
     */
    public static LabRbridge memserver(PartitionLab lab, String node, String capacity, String... more)
            throws IOException {
        List<String> args = new ArrayList<>(List.of("memserver", "--listen", lab.address(node) + ":0", "--capacity",
                capacity, "--admin", "127.0.0.1:0", "--metrics", "none", "--transport", "tcp"));
        args.addAll(List.of(more));
        LabRbridge m = start(lab, node, "memserver-" + node, args);
        Matcher lending = m.await(LENDING);
        m.address = lending.group(1);
        m.adminUrl = "http://" + lending.group(2) + "/";
        return m;
    }

    /**
     * {@code rbridge serve} in {@code node}: NBD on the node's lab address, admin on its loopback, the given
     * memservers ({@link #address()}) and {@code more} (volumes, --timeout); returns once it serves.
     */
    public static LabRbridge bridge(PartitionLab lab, String node, List<LabRbridge> memservers, String... more)
            throws IOException {
        List<String> args = new ArrayList<>(List.of("serve", "--listen", lab.address(node) + ":0", "--admin",
                "127.0.0.1:0", "--metrics", "none", "--transport", "tcp"));
        for (LabRbridge m : memservers) {
            args.addAll(List.of("--memserver", m.address()));
        }
        args.addAll(List.of(more));
        LabRbridge b = start(lab, node, "bridge-" + node, args);
        b.adminUrl = b.await(ADMIN).group(1);
        b.address = b.await(SERVING).group(1);
        return b;
    }

    private static LabRbridge start(PartitionLab lab, String node, String label, List<String> args)
            throws IOException {
        List<String> jvm = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-XX:MaxDirectMemorySize=2g", "-XX:+UseParallelGC",
                "-cp", System.getProperty("java.class.path"), Main.class.getName()));
        jvm.addAll(args);
        Path out = lab.logDir().resolve(label + ".out");
        Path log = lab.logDir().resolve(label + ".log");
        Files.writeString(lab.logDir().resolve(label + ".cmd"), String.join(" ", args) + "\n");
        Process p = lab.start(new ProcessBuilder(lab.command(node, jvm)).redirectOutput(out.toFile())
                .redirectError(log.toFile())
                .redirectInput(ProcessBuilder.Redirect.from(Path.of("/dev/null").toFile())));
        return new LabRbridge(label, node, p, out, log);
    }

    /** A memserver's {@code host:port} (as the bridge's --memserver and its admin JSON name it). */
    public String address() {
        return address;
    }

    /** A bridge's NBD URI for a volume: {@code nbd://NODE_ADDRESS:PORT/VOLUME}. */
    public String uri(String volume) {
        return address.substring(0, address.lastIndexOf('/') + 1) + volume;
    }

    /** The node it runs in. */
    public String node() {
        return node;
    }

    /** Its admin base URL on its node's loopback ({@code http://127.0.0.1:PORT/}). */
    public String adminUrl() {
        return adminUrl;
    }

    public boolean isAlive() {
        return process.isAlive();
    }

    /** The log (stderr) so far. */
    public String log() {
        return read(log);
    }

    /** SIGTERM, and SIGKILL if it is not gone within {@code grace}. */
    public void terminate(Duration grace) throws InterruptedException {
        process.destroy();
        if (!process.waitFor(grace.toMillis(), TimeUnit.MILLISECONDS)) {
            process.destroyForcibly();
            process.waitFor(30, TimeUnit.SECONDS);
        }
    }

    /** The tails of its output and log, for failure messages. */
    public String tails() {
        return "---- " + label + ".out\n" + tail(read(out), 20) + "---- " + label + ".log\n" + tail(read(log), 80);
    }

    private Matcher await(Pattern p) {
        long deadline = System.nanoTime() + START_TIMEOUT.toNanos();
        while (true) {
            Matcher m = p.matcher(read(out));
            if (m.find()) {
                return m;
            }
            if (!process.isAlive()) {
                throw new IllegalStateException(label + " exited with " + process.exitValue() + " before printing '"
                        + p + "'\n" + tails());
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException(label + " did not print '" + p + "' within " + START_TIMEOUT + "\n"
                        + tails());
            }
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        }
    }

    private static String tail(String text, int lines) {
        String[] all = text.split("\n");
        StringBuilder b = new StringBuilder();
        for (int i = Math.max(0, all.length - lines); i < all.length; i++) {
            b.append(all[i]).append('\n');
        }
        return b.toString();
    }

    private static String read(Path p) {
        try {
            return Files.exists(p) ? Files.readString(p, StandardCharsets.UTF_8) : "";
        } catch (IOException e) {
            return "(cannot read " + p + ": " + e.getMessage() + ")";
        }
    }
}
