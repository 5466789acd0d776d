package dev.rbridge.cli.serve;

import dev.rbridge.cli.Main;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.LifecycleMethodExecutionExceptionHandler;
import org.junit.jupiter.api.extension.TestExecutionExceptionHandler;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Predicate;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A real rbridge deployment for tests: N {@code rbridge memserver} processes on free loopback ports and one
 * {@code rbridge serve} bridge in front of them, each its own JVM on the test classpath. It parses the addresses the
 * processes print, kills (SIGKILL), freezes (SIGSTOP) and thaws (SIGCONT) memservers for real, restarts the bridge
 * with the same arguments (and the same ports), and reads the bridge's admin JSON.
 *
 * <p>Every process writes its stdout to {@code NAME.out} and its stderr (the log) to {@code NAME.log} under
 * {@code target/serve-logs/CLUSTER-TIME/}; {@link #logs()} collects their tails, and {@link LogsOnFailure} attaches them
 * to any failing test of a class that registers it. {@link #close()} stops everything (thawing frozen processes
 * first); a JVM shutdown hook kills whatever a test forgot, so no process outlives the test JVM.
 *
 * <pre>
 * try (ServeCluster c = ServeCluster.builder("demo").memservers(2).volume("disk,size=1G,replicas=2,slab=16M").start()) {
 *     PeerTool.check(60, "nbdinfo", c.uri("disk"));
 *     c.memserver(1).kill9();
 *     c.awaitAdmin("/volumes", v -> ...);
 * }
 * </pre>
 */
public final class ServeCluster implements AutoCloseable {
    private static final Pattern LENDING = Pattern.compile("rbridge memserver: lending \\S+ at (\\S+):(\\d+)");
    private static final Pattern SERVING = Pattern.compile("rbridge serve: serving (\\S+)");
    private static final Pattern ADMIN = Pattern.compile("rbridge serve: admin http://([^/\\s]+)/");
    private static final Pattern METRICS = Pattern.compile("metrics http://([^/\\s]+)/metrics");
    private static final Pattern MEMSERVER_ADMIN = Pattern.compile("rbridge memserver: lending .* admin (\\S+:\\d+)");
    private static final Pattern TCP_URI = Pattern.compile("nbd://([^/]+):(\\d+)/");
    private static final Duration START_TIMEOUT = Duration.ofSeconds(60);
    private static final AtomicInteger SEQ = new AtomicInteger();
    private static final List<RbridgeProcess> LIVE = new CopyOnWriteArrayList<>();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            for (RbridgeProcess p : LIVE) {
                p.process.destroyForcibly();
            }
        }, "serve-cluster-reaper"));
    }

    private final Builder config;
    private final Path dir;
    private final List<Memserver> memservers = new ArrayList<>();
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    private RbridgeProcess bridge;
    private int bridgeStarts;
    /** Set by {@link #killBridge()}: the next start may find the killed bridge's lease still held. */
    private boolean leaseMayOutliveBridge;
    private final List<RbridgeProcess> rivals = new ArrayList<>();
    private final Map<String, String> uris = new LinkedHashMap<>();
    private String defaultUri;
    private String unixUri;
    private int nbdPort;
    private String adminAddress;
    private String metricsAddress;
    private boolean closed;

    private ServeCluster(Builder config) throws IOException {
        this.config = config;
        Path base = Path.of(System.getProperty("basedir", "."), "target", "serve-logs").toAbsolutePath().normalize();
        String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
        this.dir = Files.createDirectories(base.resolve(config.name + "-" + stamp + "-" + SEQ.incrementAndGet()));
    }

    public static Builder builder(String name) {
        return new Builder(name);
    }

    /** What to start; {@link #start()} launches it and waits until the bridge serves. */
    public static final class Builder {
        private final String name;
        private int memservers = 2;
        private String capacity = "2G";
        private final List<String> volumes = new ArrayList<>();
        private boolean unix;
        private boolean admin = true;
        private boolean memserverAdmin;
        private boolean metrics;
        private String token;
        private String timeout = "5";
        private String transport = "tcp";
        private final List<String> bridgeArgs = new ArrayList<>();
        private final List<String> memserverArgs = new ArrayList<>();
        private final List<String> jvmArgs = new ArrayList<>();
        private final List<String> memserverJvmArgs = new ArrayList<>();

        private Builder(String name) {
            this.name = name;
        }

        /** How many memserver processes (default 2). */
        public Builder memservers(int n) {
            this.memservers = n;
            return this;
        }

        /** Each memserver's --capacity (default 2G). */
        public Builder capacity(String capacity) {
            this.capacity = capacity;
            return this;
        }

        /** A --volume spec, e.g. {@code disk,size=512M,replicas=2,slab=16M}; repeatable, the first is the default. */
        public Builder volume(String spec) {
            volumes.add(spec);
            return this;
        }

        /** Also serve on a Unix socket in the log folder ({@link #unixUri(String)}). */
        public Builder unix(boolean unix) {
            this.unix = unix;
            return this;
        }

        /** The bridge's admin interface on a free port (default on); off gives {@code --admin none}. */
        public Builder admin(boolean admin) {
            this.admin = admin;
            return this;
        }

        /**
         * Every memserver's admin interface on a free port ({@link Memserver#adminAddress()}); default off
         * ({@code --admin none}).
         */
        public Builder memserverAdmin(boolean on) {
            this.memserverAdmin = on;
            return this;
        }

        /**
         * Prometheus endpoints on free ports for every process ({@link #metricsAddress()}, {@link
         * Memserver#metricsAddress()}); default off ({@code --metrics none}).
         */
        public Builder metrics(boolean metrics) {
            this.metrics = metrics;
            return this;
        }

        /** A shared secret for the memservers, the bridge and its admin interface (default none). */
        public Builder token(String token) {
            this.token = token;
            return this;
        }

        /** The bridge's --timeout in seconds (default 5). */
        public Builder timeout(String seconds) {
            this.timeout = seconds;
            return this;
        }

        /**
         * The remote-memory transport of the memservers and the bridge (default tcp). For ucx every process gets
         * UCX_TLS=tcp unless the environment chose otherwise (no RDMA device on test hosts; without it local
         * processes would use shared memory) and UCX's signal handlers off, as the launcher does.
         */
        public Builder transport(String transport) {
            this.transport = transport;
            return this;
        }

        /** More arguments for {@code rbridge serve}, e.g. {@code --lease 3}. */
        public Builder bridgeArgs(String... args) {
            bridgeArgs.addAll(List.of(args));
            return this;
        }

        /** More arguments for every {@code rbridge memserver}. */
        public Builder memserverArgs(String... args) {
            memserverArgs.addAll(List.of(args));
            return this;
        }

        /** JVM options for every process (default: none beyond the launcher's). */
        public Builder jvmArgs(String... args) {
            jvmArgs.addAll(List.of(args));
            return this;
        }

        /** JVM options for the memservers only, after {@link #jvmArgs} (a small -XX:MaxDirectMemorySize, say). */
        public Builder memserverJvmArgs(String... args) {
            memserverJvmArgs.addAll(List.of(args));
            return this;
        }

        public ServeCluster start() throws IOException {
            if (volumes.isEmpty() && !bridgeArgs.contains("--config")) {
                throw new IllegalStateException("give at least one volume (or a --config that has one)");
            }
            ServeCluster c = new ServeCluster(this);
            boolean ok = false;
            try {
                for (int i = 0; i < memservers; i++) {
                    Memserver m = new Memserver(c, i);
                    c.memservers.add(m);
                    m.start(0);
                }
                c.startBridge();
                ok = true;
                return c;
            } finally {
                if (!ok) {
                    c.close();
                }
            }
        }
    }

    // ------------------------------------------------------------------------------------------------ processes

    /** One {@code rbridge} JVM with its output files. */
    public static final class RbridgeProcess {
        final String label;
        final Process process;
        final Path out;
        final Path log;
        private volatile boolean frozen;

        private RbridgeProcess(String label, Process process, Path out, Path log) {
            this.label = label;
            this.process = process;
            this.out = out;
            this.log = log;
        }

        public long pid() {
            return process.pid();
        }

        public boolean isAlive() {
            return process.isAlive();
        }

        public Path logFile() {
            return log;
        }

        /** The log (stderr) so far. */
        public String log() {
            return read(log);
        }

        /**
         * Waits until the log holds {@code text}: a line is written after the state it reports changes, so a test that
         * saw the state through the admin interface polls for the line rather than reading the log once.
         */
        public void awaitLog(String text, Duration timeout) throws InterruptedException {
            long end = System.nanoTime() + timeout.toNanos();
            while (!log().contains(text)) {
                if (System.nanoTime() - end > 0) {
                    throw new AssertionError("no '" + text + "' in the log within " + timeout + ":\n" + log());
                }
                Thread.sleep(100);
            }
        }

        /** SIGKILL, and wait for the process to be gone. */
        public void kill9() {
            process.destroyForcibly();
            waitGone(Duration.ofSeconds(30));
            frozen = false;
        }

        /** SIGSTOP: the process stays, its sockets stay open, nothing answers. */
        public void freeze() {
            signal("STOP");
            frozen = true;
        }

        /** SIGCONT after {@link #freeze()}. */
        public void thaw() {
            signal("CONT");
            frozen = false;
        }

        /** SIGTERM (after SIGCONT if frozen); SIGKILL if it is not gone within {@code grace}. Returns the exit code. */
        public int terminate(Duration grace) {
            if (frozen) {
                thaw();
            }
            process.destroy();
            try {
                if (!process.waitFor(grace.toMillis(), TimeUnit.MILLISECONDS)) {
                    process.destroyForcibly();
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                process.destroyForcibly();
            }
            waitGone(Duration.ofSeconds(30));
            return process.isAlive() ? -1 : process.exitValue();
        }

        private void waitGone(Duration d) {
            try {
                process.waitFor(d.toMillis(), TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            if (!process.isAlive()) {
                LIVE.remove(this);
            }
        }

        private void signal(String sig) {
            if (!process.isAlive()) {
                throw new IllegalStateException(label + " (pid " + pid() + ") is not running, cannot send SIG" + sig);
            }
            try {
                Process k = new ProcessBuilder("kill", "-" + sig, String.valueOf(pid())).redirectErrorStream(true)
                        .start();
                String msg = new String(k.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
                if (!k.waitFor(10, TimeUnit.SECONDS) || k.exitValue() != 0) {
                    throw new IllegalStateException("kill -" + sig + " " + pid() + " failed: " + msg);
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        }

        /** Waits until stdout has a line matching {@code p}; fails with the logs if the process dies first. */
        Matcher await(Pattern p, int occurrences, Duration timeout) {
            long deadline = System.nanoTime() + timeout.toNanos();
            while (true) {
                List<Matcher> found = new ArrayList<>();
                for (String line : read(out).split("\n")) {
                    Matcher m = p.matcher(line);
                    if (m.find()) {
                        found.add(m);
                    }
                }
                if (found.size() >= occurrences) {
                    return found.get(occurrences - 1);
                }
                if (!process.isAlive()) {
                    throw new IllegalStateException(label + " exited with " + process.exitValue()
                            + " before printing '" + p + "'\n" + tail(label, out, 50) + tail(label, log, 100));
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(label + " did not print '" + p + "' within " + timeout + "\n"
                            + tail(label, out, 50) + tail(label, log, 100));
                }
                sleep(50);
            }
        }

        /** All stdout lines matching {@code p} (first group), once the process has printed them. */
        List<String> matches(Pattern p) {
            List<String> got = new ArrayList<>();
            for (String line : read(out).split("\n")) {
                Matcher m = p.matcher(line);
                if (m.find()) {
                    got.add(m.group(1));
                }
            }
            return got;
        }
    }

    private RbridgeProcess launch(String label, List<String> args) throws IOException {
        List<String> cmd = new ArrayList<>();
        // SIGHUP as a service manager delivers it, even when the tests run under nohup (CI): the JVM keeps ignoring a
        // signal it was started ignoring. env execs java, so the pid is the JVM's.
        cmd.addAll(List.of("env", "--default-signal=HUP"));
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("--enable-native-access=ALL-UNNAMED");
        cmd.add("-XX:MaxDirectMemorySize=2g");
        cmd.add("-XX:+UseParallelGC");
        cmd.addAll(config.jvmArgs);
        if (label.startsWith("memserver")) {
            cmd.addAll(config.memserverJvmArgs);
        }
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(Main.class.getName());
        cmd.addAll(args);
        Path out = dir.resolve(label + ".out");
        Path log = dir.resolve(label + ".log");
        Files.writeString(dir.resolve(label + ".cmd"), String.join(" ", args) + "\n");
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.environment().putIfAbsent("UCX_ERROR_SIGNALS", "");
        if (config.transport.equals("ucx")) {
            pb.environment().putIfAbsent("UCX_TLS", "tcp");
        }
        Process p = pb.redirectOutput(out.toFile()).redirectError(log.toFile())
                .redirectInput(ProcessBuilder.Redirect.from(Path.of("/dev/null").toFile())).start();
        RbridgeProcess rp = new RbridgeProcess(label, p, out, log);
        LIVE.add(rp);
        return rp;
    }

    // ------------------------------------------------------------------------------------------------ memservers

    /** One memserver process; it keeps its port across {@link #restart()}. */
    public static final class Memserver {
        private final ServeCluster cluster;
        private final int index;
        private RbridgeProcess process;
        private int starts;
        private String host;
        private int port;
        private String metricsAddress;
        private String adminAddress;

        private Memserver(ServeCluster cluster, int index) {
            this.cluster = cluster;
            this.index = index;
        }

        private void start(int onPort) throws IOException {
            List<String> args = new ArrayList<>(List.of("memserver", "--listen", "127.0.0.1:" + onPort,
                    "--capacity", cluster.config.capacity, "--admin", !cluster.config.memserverAdmin ? "none"
                            : adminAddress == null ? "127.0.0.1:0" : adminAddress,
                    "--transport",
                    cluster.config.transport, "--metrics",
                    !cluster.config.metrics ? "none" : metricsAddress == null ? "127.0.0.1:0" : metricsAddress));
            if (cluster.config.token != null) {
                args.addAll(List.of("--token", cluster.config.token));
            }
            args.addAll(cluster.config.memserverArgs);
            starts++;
            process = cluster.launch("memserver-" + index + (starts > 1 ? "." + starts : ""), args);
            Matcher m = process.await(LENDING, 1, START_TIMEOUT);
            host = m.group(1);
            port = Integer.parseInt(m.group(2));
            if (cluster.config.metrics) {
                metricsAddress = process.await(METRICS, 1, START_TIMEOUT).group(1);
            }
            if (cluster.config.memserverAdmin) {
                adminAddress = process.await(MEMSERVER_ADMIN, 1, START_TIMEOUT).group(1);
            }
        }

        /** {@code host:port} of its admin interface (kept across restarts), or null without memserverAdmin. */
        public String adminAddress() {
            return adminAddress;
        }

        /** {@code host:port} of its /metrics (kept across restarts), or null without {@link Builder#metrics}. */
        public String metricsAddress() {
            return metricsAddress;
        }

        public int index() {
            return index;
        }

        /** {@code host:port} as given to the bridge's --memserver (and as the bridge labels replicas). */
        public String address() {
            return host + ":" + port;
        }

        public long pid() {
            return process.pid();
        }

        public RbridgeProcess process() {
            return process;
        }

        public boolean isAlive() {
            return process.isAlive();
        }

        public void kill9() {
            process.kill9();
        }

        public void freeze() {
            process.freeze();
        }

        public void thaw() {
            process.thaw();
        }

        /** Start it again on the same port (after {@link #kill9()} or a stop): a new instance with empty memory. */
        public void restart() throws IOException {
            if (process.isAlive()) {
                process.terminate(Duration.ofSeconds(10));
            }
            start(port);
        }
    }

    public List<Memserver> memservers() {
        return Collections.unmodifiableList(memservers);
    }

    public Memserver memserver(int i) {
        return memservers.get(i);
    }

    // ------------------------------------------------------------------------------------------------ the bridge

    private List<String> bridgeArgs() {
        List<String> args = new ArrayList<>(List.of("serve", "--listen", "127.0.0.1:" + nbdPort));
        if (config.unix) {
            args.addAll(List.of("--unix", dir.resolve("nbd.sock").toString()));
        }
        for (Memserver m : memservers) {
            args.addAll(List.of("--memserver", m.address()));
        }
        for (String v : config.volumes) {
            args.addAll(List.of("--volume", v));
        }
        args.addAll(List.of("--admin", config.admin ? (adminAddress == null ? "127.0.0.1:0" : adminAddress) : "none"));
        args.addAll(List.of("--metrics", !config.metrics ? "none"
                : metricsAddress == null ? "127.0.0.1:0"
                        : metricsAddress));
        args.addAll(List.of("--timeout", config.timeout));
        args.addAll(List.of("--transport", config.transport));
        if (config.token != null) {
            args.addAll(List.of("--token", config.token));
        }
        args.addAll(config.bridgeArgs);
        return args;
    }

    /**
     * Starts the bridge (again) with the same arguments; after the first start the NBD and admin ports are the ones
     * it got then, so URIs stay valid. Only after {@link #killBridge()} may a previous bridge's lease still hold a
     * volume (the new one exits with "in use by another bridge"): then this retries until the lease lapses. After a
     * graceful stop the lease must have been given back, so a refusal then fails at once instead of being waited out.
     */
    public void startBridge() throws IOException {
        if (bridge != null && bridge.isAlive()) {
            throw new IllegalStateException("the bridge is running; stop it first");
        }
        long deadline = System.nanoTime() + (leaseMayOutliveBridge ? TimeUnit.SECONDS.toNanos(60) : 0);
        leaseMayOutliveBridge = false;
        while (true) {
            bridgeStarts++;
            bridge = launch("bridge" + (bridgeStarts > 1 ? "." + bridgeStarts : ""), bridgeArgs());
            int serving = 1 + (config.unix ? 1 : 0);
            try {
                if (config.admin) {
                    Matcher a = bridge.await(ADMIN, 1, START_TIMEOUT);
                    adminAddress = a.group(1);
                } else {
                    bridge.await(SERVING, serving, START_TIMEOUT);
                }
                if (config.metrics) {
                    metricsAddress = bridge.await(METRICS, 1, START_TIMEOUT).group(1);
                }
                break;
            } catch (IllegalStateException e) {
                if (!bridge.isAlive() && bridge.log().contains("in use by another bridge")
                        && System.nanoTime() < deadline) {
                    sleep(500);
                    continue;
                }
                throw e;
            }
        }
        List<String> served = bridge.matches(SERVING);
        if (served.size() != 1 + (config.unix ? 1 : 0)) {
            throw new IllegalStateException("bridge printed " + served + "\n" + logs());
        }
        defaultUri = served.get(0);
        Matcher tcp = TCP_URI.matcher(defaultUri);
        if (!tcp.find()) {
            throw new IllegalStateException("not a TCP NBD URI: " + defaultUri);
        }
        nbdPort = Integer.parseInt(tcp.group(2));
        unixUri = config.unix ? served.get(1) : null;
    }

    /**
     * Another bridge process over the same memservers and volumes, with its own NBD port and neither admin nor
     * metrics, as a second host taking the volumes over would run it. While the volumes are "in use by another
     * bridge" it is started again until {@code takeOverWithin} has passed. Returns its NBD URI prefix
     * ({@code nbd://127.0.0.1:PORT/}, the volume name goes after it); it is stopped with the cluster.
     */
    public String startRivalBridge(Duration takeOverWithin) throws IOException {
        long deadline = System.nanoTime() + takeOverWithin.toNanos();
        while (true) {
            List<String> args = new ArrayList<>(List.of("serve", "--listen", "127.0.0.1:0", "--admin", "none",
                    "--metrics", "none", "--timeout", config.timeout, "--transport", config.transport));
            for (Memserver m : memservers) {
                args.addAll(List.of("--memserver", m.address()));
            }
            for (String v : config.volumes) {
                args.addAll(List.of("--volume", v));
            }
            if (config.token != null) {
                args.addAll(List.of("--token", config.token));
            }
            args.addAll(config.bridgeArgs);
            RbridgeProcess rival = launch("rival." + (rivals.size() + 1), args);
            rivals.add(rival);
            try {
                String uri = rival.await(SERVING, 1, START_TIMEOUT).group(1);
                return uri.substring(0, uri.lastIndexOf('/') + 1);
            } catch (IllegalStateException e) {
                if (!rival.isAlive() && rival.log().contains("in use by another bridge")
                        && System.nanoTime() < deadline) {
                    sleep(200);
                    continue;
                }
                throw e;
            }
        }
    }

    /** SIGTERM and wait: a bridge that exits gives its leases back at once. Returns its exit code. */
    public int stopBridge() {
        return bridge.terminate(Duration.ofSeconds(30));
    }

    /** SIGKILL: its leases stay until they lapse. */
    public void killBridge() {
        leaseMayOutliveBridge = true;
        bridge.kill9();
    }

    /** Graceful stop, then start with the same arguments and ports. */
    public void restartBridge() throws IOException {
        if (bridge.isAlive()) {
            int code = stopBridge();
            if (code != 0) {
                // SIGKILLed after the grace period, or failed on its way out: its leases may not have been given back
                throw new IllegalStateException("the bridge did not stop gracefully (exit " + code + ")\n" + logs());
            }
        }
        startBridge();
    }

    /** The bridge's /metrics {@code host:port} (kept across restarts), or null without {@link Builder#metrics}. */
    public String metricsAddress() {
        return metricsAddress;
    }

    public RbridgeProcess bridge() {
        return bridge;
    }

    /** {@code nbd://127.0.0.1:PORT/VOLUME}. */
    public String uri(String volume) {
        return defaultUri.substring(0, defaultUri.lastIndexOf('/') + 1) + volume;
    }

    /** {@code nbd+unix:///VOLUME?socket=PATH} (needs {@link Builder#unix(boolean)}). */
    public String unixUri(String volume) {
        if (unixUri == null) {
            throw new IllegalStateException("the cluster was built without a Unix socket");
        }
        int q = unixUri.indexOf('?');
        return "nbd+unix:///" + volume + unixUri.substring(q);
    }

    public int nbdPort() {
        return nbdPort;
    }

    /** What {@link #adminCli} printed (its output, then its error stream) and its exit status. */
    public record AdminRun(int code, String out) {
    }

    /** {@code rbridge admin --bridge ADMIN --token-file TOKEN ARGS...} as a process of its own, as an operator runs it. */
    public AdminRun adminCli(Path token, String... args) throws IOException, InterruptedException {
        Path log = Files.createTempFile(dir, "admin", ".log");
        List<String> argv = new ArrayList<>(List.of("admin", "--bridge", adminAddress(), "--token-file",
                token.toString()));
        argv.addAll(List.of(args));
        Process p = dev.rbridge.cli.CliProcess.start(log, argv.toArray(String[]::new));
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new IllegalStateException("rbridge admin " + String.join(" ", args) + " did not end");
        }
        return new AdminRun(p.exitValue(), (out + Files.readString(log)).strip());
    }

    public String adminAddress() {
        if (adminAddress == null) {
            throw new IllegalStateException("the cluster was built with --admin none");
        }
        return adminAddress;
    }

    public Path logDir() {
        return dir;
    }

    // ------------------------------------------------------------------------------------------------ admin JSON

    /** GET {@code path} on the bridge's admin interface; the parsed JSON (maps, lists, strings, longs, doubles). */
    public Object admin(String path) {
        HttpRequest.Builder req = HttpRequest.newBuilder(URI.create("http://" + adminAddress() + path))
                .timeout(Duration.ofSeconds(10)).GET();
        if (config.token != null) {
            req.header("Authorization", "Bearer " + config.token);
        }
        try {
            HttpResponse<String> r = http.send(req.build(), HttpResponse.BodyHandlers.ofString());
            if (r.statusCode() != 200) {
                throw new IllegalStateException("GET " + path + ": HTTP " + r.statusCode() + ": " + r.body());
            }
            return Json.parse(r.body());
        } catch (IOException e) {
            throw new UncheckedIOException("GET " + path + " on " + adminAddress, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** GET /volumes. */
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> volumes() {
        return (List<Map<String, Object>>) admin("/volumes");
    }

    /** GET /volumes/NAME (from /volumes). */
    public Map<String, Object> volume(String name) {
        for (Map<String, Object> v : volumes()) {
            if (name.equals(v.get("name"))) {
                return v;
            }
        }
        throw new IllegalStateException("no volume " + name + " in " + volumes());
    }

    /** GET /volumes/NAME/slabs (allocated slabs only, or every slab). */
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> slabs(String volume, boolean all) {
        return (List<Map<String, Object>>) admin("/volumes/" + volume + "/slabs" + (all ? "?all=1" : ""));
    }

    /** GET /memservers. */
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> memserverStatus() {
        return (List<Map<String, Object>>) admin("/memservers");
    }

    /** GET /rebuild. */
    @SuppressWarnings("unchecked")
    public Map<String, Object> rebuild() {
        return (Map<String, Object>) admin("/rebuild");
    }

    /** Polls {@code path} until {@code ok} holds; fails with the last answer and the logs otherwise. */
    public Object awaitAdmin(String path, Predicate<Object> ok, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        Object last = null;
        while (System.nanoTime() < deadline) {
            try {
                last = admin(path);
                if (ok.test(last)) {
                    return last;
                }
            } catch (RuntimeException e) {
                last = e;
            }
            sleep(100);
        }
        throw new AssertionError("GET " + path + " did not reach the expected state within " + timeout + "; last: "
                + last + "\n" + logs());
    }

    /** The memserver labels of a slab's replicas ({@code "127.0.0.1:PORT#REGION ..."} -> the host:port parts). */
    public static List<String> replicaServers(Map<String, Object> slab) {
        List<String> out = new ArrayList<>();
        for (String r : String.valueOf(slab.get("replicas")).trim().split("\\s+")) {
            if (!r.isEmpty()) {
                int hash = r.lastIndexOf('#');
                out.add(hash < 0 ? r : r.substring(0, hash));
            }
        }
        return out;
    }

    // ------------------------------------------------------------------------------------------------ logs, close

    /** The tail of every process's output and log, for failure messages. */
    public String logs() {
        StringBuilder b = new StringBuilder("---- rbridge processes, logs in ").append(dir).append('\n');
        try (var files = Files.list(dir)) {
            for (Path p : files.sorted().toList()) {
                String n = p.getFileName().toString();
                if (n.endsWith(".out") || n.endsWith(".log")) {
                    b.append(tail(n, p, n.endsWith(".log") ? 80 : 20));
                }
            }
        } catch (IOException e) {
            b.append("(cannot list ").append(dir).append(": ").append(e.getMessage()).append(")\n");
        }
        return b.toString();
    }

    private static String tail(String label, Path file, int lines) {
        String text = read(file);
        String[] all = text.split("\n", -1);
        int from = Math.max(0, all.length - lines - 1);
        StringBuilder b = new StringBuilder("---- ").append(label).append(" (").append(file.getFileName())
                .append(from > 0 ? ", last " + lines + " lines" : "").append(")\n");
        for (int i = from; i < all.length; i++) {
            if (i < all.length - 1 || !all[i].isEmpty()) {
                b.append(all[i]).append('\n');
            }
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

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** Stops the bridge (SIGTERM, so it gives back its leases), then every memserver; SIGKILL for stragglers. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        for (Memserver m : memservers) {
            if (m.process != null && m.process.frozen && m.process.isAlive()) {
                m.process.thaw(); // a frozen memserver would hold the bridge's shutdown up
            }
        }
        if (bridge != null && bridge.isAlive()) {
            bridge.terminate(Duration.ofSeconds(15));
        }
        for (RbridgeProcess rival : rivals) {
            if (rival.isAlive()) {
                rival.terminate(Duration.ofSeconds(15));
            }
        }
        for (Memserver m : memservers) {
            if (m.process != null && m.process.isAlive()) {
                m.process.process.destroy();
            }
        }
        for (Memserver m : memservers) {
            if (m.process != null && m.process.isAlive()) {
                m.process.terminate(Duration.ofSeconds(10));
            }
        }
        try {
            Files.deleteIfExists(dir.resolve("nbd.sock"));
        } catch (IOException e) {
            // the bridge removes it on a graceful stop; a leftover socket file is harmless
        }
    }

    /**
     * Attaches the logs of the clusters it watches to any exception thrown by a test or a lifecycle method of the
     * class that registers it ({@code @RegisterExtension static final ServeCluster.LogsOnFailure LOGS = ...}).
     */
    public static final class LogsOnFailure implements TestExecutionExceptionHandler,
            LifecycleMethodExecutionExceptionHandler {
        private final List<ServeCluster> watched = new CopyOnWriteArrayList<>();

        public ServeCluster watch(ServeCluster c) {
            watched.add(c);
            return c;
        }

        private Throwable attach(Throwable t) {
            for (ServeCluster c : watched) {
                t.addSuppressed(new ClusterLogs(c.logs()));
            }
            return t;
        }

        @Override
        public void handleTestExecutionException(ExtensionContext context, Throwable throwable) throws Throwable {
            throw attach(throwable);
        }

        @Override
        public void handleBeforeAllMethodExecutionException(ExtensionContext context, Throwable throwable)
                throws Throwable {
            throw attach(throwable);
        }

        @Override
        public void handleAfterAllMethodExecutionException(ExtensionContext context, Throwable throwable)
                throws Throwable {
            throw attach(throwable);
        }
    }

    /** Carries a cluster's logs in a failing test's stack trace. */
    static final class ClusterLogs extends Exception {
        ClusterLogs(String logs) {
            super(logs, null, false, false);
        }
    }

    // ------------------------------------------------------------------------------------------------ JSON

    /** The project's one JSON reader ({@link dev.rbridge.ops.json.Json}), under the name these tests use. */
    public static final class Json {
        private Json() {}

        /** Objects as maps in document order, arrays as lists, strings, longs, doubles, booleans, null. */
        public static Object parse(String text) {
            return dev.rbridge.ops.json.Json.parse(text);
        }
    }
}
