package dev.rbridge.cli.partition;

import org.junit.jupiter.api.Assumptions;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Network partitions for real between processes on this host: every node (a memserver, a bridge, a client) is a
 * network namespace of its own, and the nodes meet on a Linux bridge device in one more namespace, the hub. Each node
 * has a veth whose other end is a port of the hub's bridge, an address in 10.251.0.0/24 and its loopback up; nothing
 * connects a node or the hub to the host's own network, so the addresses exist only inside the lab.
 *
 * <p>Faults are nftables rules on the wire: a table {@value #TABLE} of the bridge family in the hub, whose forward
 * chain sees every frame between two nodes. {@link #cut} drops (never rejects) every IPv4 packet between two nodes,
 * both ways, so both sides see silence, as in a real partition, and keep running and retrying; {@link #loss} drops a
 * share of them ({@code numgen random mod 100}), each way independently; {@link #heal} removes both. Each change
 * rewrites the whole table in one {@code nft -f} transaction. Why in the hub and not in the nodes' own namespaces: a
 * packet a node's output hook drops fails the sender's call with EPERM (a UDP {@code send} throws), which no real
 * partition does; a drop in the hub is a silent wire, and each packet meets the rules once.
 *
 * <p>Why one bridge and not a veth pair per pair of nodes: N links instead of N(N-1)/2, one subnet, and a fault
 * between two nodes is a filter rule that leaves every other path alone; a link down would cut a node from all.
 * ARP is left alone: a cut node's neighbours stay resolved, as when a switch in between drops the traffic.
 * Why the test's NBD clients run in a node ({@code client}, say) rather than in the host namespace: the host keeps
 * no interface or address of the lab, and the client's own link can be cut like any other.
 *
 * <p>Names: every namespace is {@code rbpart-PID-SEQ-NODE} (PID of the test JVM), so parallel runs never collide;
 * at start the lab deletes the namespaces of earlier runs whose JVM is gone (aborted runs). {@link #close()} kills
 * every process it started and deletes every namespace (their veths and bridge go with them), also after a failed
 * test; a shutdown hook does the same if the JVM exits first. Needs root, {@code ip netns} and {@code nft}:
 * {@link #assumeAvailable()} skips the calling test with the reason otherwise.
 *
 * <p>Delay without netem (the host kernel has none): {@link #delay} sends new TCP connections from one node to a
 * port of another through a {@link DelayRelay} in the receiving node, by an nftables redirect there (table
 * {@value #DELAY_TABLE}); the relay holds each chunk for the delay in each direction. TCP only: UDP is not delayed.
 *
 * <pre>
 * try (PartitionLab lab = PartitionLab.create("m0", "m1", "bridge", "client")) {
 *     Process p = lab.exec("m0", "sleep", "60");
 *     lab.cut("bridge", "m1");
 *     lab.heal("bridge", "m1");
 * }
 * </pre>
 */
public final class PartitionLab implements AutoCloseable {
    /** The nftables table (bridge family) of the cuts and losses, in the hub's namespace. */
    static final String TABLE = "rbpart";
    /** The nftables table of {@link #delay}'s redirects, in the receiving node's namespace. */
    static final String DELAY_TABLE = "rbpart_delay";
    private static final String PREFIX = "rbpart-";
    private static final Pattern OURS = Pattern.compile("^" + PREFIX + "(\\d+)-\\d+-\\S+");
    private static final String SUBNET = "10.251.0.";
    private static final AtomicInteger SEQ = new AtomicInteger();
    private static final List<PartitionLab> OPEN = new CopyOnWriteArrayList<>();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            for (PartitionLab lab : OPEN) {
                lab.close();
            }
        }, "partition-lab-reaper"));
    }

    private final String prefix;
    private final Path dir;
    private final Map<String, Integer> nodes = new LinkedHashMap<>();
    /** Per unordered pair (key "a|b", a before b): the share of packets dropped, 100 for a cut. */
    private final Map<String, Integer> dropPercent = new TreeMap<>();
    private final List<Process> started = new CopyOnWriteArrayList<>();
    private final List<String> namespaces = new ArrayList<>();
    /** {@link #delay}'s relays, by "CLIENT>SERVER:PORT". */
    private final Map<String, Relay> relays = new TreeMap<>();
    private boolean closed;

    private PartitionLab(String prefix, Path dir) {
        this.prefix = prefix;
        this.dir = dir;
    }

    /**
     * Skips the calling test (a JUnit assumption, with the reason) unless this process is root and both
     * {@code ip netns} and {@code nft} work here.
     */
    public static void assumeAvailable() {
        Result id = runQuietly(10, List.of("id", "-u"));
        Assumptions.assumeTrue(id.code == 0 && id.out.strip().equals("0"),
                "network namespaces need root; this test runs as uid " + id.out.strip());
        Result ip = runQuietly(10, List.of("ip", "netns", "list"));
        Assumptions.assumeTrue(ip.code == 0, "`ip netns` is unavailable (Debian package iproute2): " + ip.out);
        Result nft = runQuietly(10, List.of("nft", "--version"));
        Assumptions.assumeTrue(nft.code == 0, "`nft` is unavailable (Debian package nftables): " + nft.out);
        String probe = PREFIX + ProcessHandle.current().pid() + "-0-probe"; // as a leftover, removed like one
        Result add = runQuietly(10, List.of("ip", "netns", "add", probe));
        runQuietly(10, List.of("ip", "netns", "del", probe));
        Assumptions.assumeTrue(add.code == 0, "this kernel or container refuses a network namespace: " + add.out);
    }

    /** Creates the hub and one namespace per node, wired and up; nodes get 10.251.0.1, .2, ... in order. */
    public static PartitionLab create(String... nodeNames) throws IOException {
        if (nodeNames.length == 0 || nodeNames.length > 250) {
            throw new IllegalArgumentException("1 to 250 nodes, not " + nodeNames.length);
        }
        removeLeftovers();
        long pid = ProcessHandle.current().pid();
        String prefix = PREFIX + pid + "-" + SEQ.incrementAndGet() + "-";
        Path base = Path.of(System.getProperty("basedir", "."), "target", "partition-logs").toAbsolutePath()
                .normalize();
        String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
        PartitionLab lab = new PartitionLab(prefix, Files.createDirectories(base.resolve(stamp + "-" + pid + "-"
                + SEQ.get())));
        OPEN.add(lab);
        boolean ok = false;
        try {
            lab.wire(nodeNames);
            ok = true;
            return lab;
        } finally {
            if (!ok) {
                lab.close();
            }
        }
    }

    private void wire(String... nodeNames) {
        String hub = prefix + "hub";
        addNamespace(hub);
        ip(hub, "link", "add", "br0", "type", "bridge");
        ip(hub, "link", "set", "br0", "up");
        nft(hub, ruleset());
        int n = 0;
        for (String name : nodeNames) {
            if (!name.matches("[A-Za-z0-9]{1,20}") || nodes.containsKey(name)) {
                throw new IllegalArgumentException("a node name is 1-20 letters or digits, once: " + name);
            }
            n++;
            nodes.put(name, n);
            String ns = node(name);
            addNamespace(ns);
            // Created in the hub with its peer put straight into the node: no name ever exists in the host namespace.
            String port = "p" + n;
            ip(hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns);
            ip(hub, "link", "set", port, "master", "br0");
            ip(hub, "link", "set", port, "up");
            ip(ns, "link", "set", "lo", "up");
            ip(ns, "addr", "add", address(name) + "/24", "dev", "eth0");
            ip(ns, "link", "set", "eth0", "up");
        }
    }

    private void addNamespace(String ns) {
        check(List.of("ip", "netns", "add", ns));
        namespaces.add(ns);
    }

    /** Deletes the namespaces of earlier runs whose test JVM is no longer running. */
    private static void removeLeftovers() {
        for (String ns : listNamespaces()) {
            Matcher m = OURS.matcher(ns);
            if (m.find() && ProcessHandle.of(Long.parseLong(m.group(1))).map(h -> !h.isAlive()).orElse(true)) {
                runQuietly(30, List.of("ip", "netns", "del", ns));
            }
        }
    }

    /** The names {@code ip netns list} shows (first word of each line). */
    static List<String> listNamespaces() {
        List<String> out = new ArrayList<>();
        for (String line : check(List.of("ip", "netns", "list")).split("\n")) {
            if (!line.isBlank()) {
                out.add(line.strip().split("\\s+")[0]);
            }
        }
        return out;
    }

    // ------------------------------------------------------------------------------------------------ nodes

    /** The namespace of a node, for {@code ip netns exec} or {@code ip -n}. */
    public String node(String name) {
        if (!nodes.containsKey(name)) {
            throw new IllegalArgumentException("no node " + name + " in " + nodes.keySet());
        }
        return prefix + name;
    }

    /** The node's IPv4 address (10.251.0.N, reachable only from the lab's other nodes). */
    public String address(String name) {
        node(name);
        return SUBNET + nodes.get(name);
    }

    public List<String> nodes() {
        return List.copyOf(nodes.keySet());
    }

    /** The prefix of this lab's namespace names ({@code rbpart-PID-SEQ-}). */
    public String prefix() {
        return prefix;
    }

    /** Where processes started with {@link #exec} leave their output. */
    public Path logDir() {
        return dir;
    }

    /** {@code ip netns exec NODE COMMAND...}, for a ProcessBuilder of the caller's own. */
    public List<String> command(String name, String... command) {
        return command(name, List.of(command));
    }

    public List<String> command(String name, List<String> command) {
        List<String> cmd = new ArrayList<>(List.of("ip", "netns", "exec", node(name)));
        cmd.addAll(command);
        return cmd;
    }

    /**
     * Starts a process in a node ({@code ip netns exec} execs it, so the pid is the command's); {@link #close()}
     * kills it if it still runs. Its stdin is a pipe, stdout and stderr are the caller's to read.
     */
    public Process exec(String name, String... command) throws IOException {
        return start(new ProcessBuilder(command(name, command)));
    }

    /** Starts a ProcessBuilder made from {@link #command} and kills it on {@link #close()}. */
    public Process start(ProcessBuilder pb) throws IOException {
        if (closed) {
            throw new IllegalStateException("the lab is closed");
        }
        Process p = pb.start();
        started.add(p);
        return p;
    }

    // ------------------------------------------------------------------------------------------------ faults

    /** Drops every packet between {@code a} and {@code b}, both ways; processes on both sides keep running. */
    public void cut(String a, String b) {
        set(a, b, 100);
    }

    /** Undoes {@link #cut} or {@link #loss} between {@code a} and {@code b}. */
    public void heal(String a, String b) {
        set(a, b, 0);
    }

    /** Cuts {@code a} from every other node. */
    public void isolate(String a) {
        for (String other : nodes.keySet()) {
            if (!other.equals(a)) {
                cut(a, other);
            }
        }
    }

    /** Heals every fault of every pair. */
    public void healAll() {
        List<String> pairs = new ArrayList<>(dropPercent.keySet());
        for (String pair : pairs) {
            String[] ab = pair.split("\\|");
            heal(ab[0], ab[1]);
        }
    }

    /**
     * Drops each packet between {@code a} and {@code b} (each way, independently) with probability
     * {@code percent}/100; a round trip survives with probability (1 - p)^2. 0 heals, 100 cuts.
     */
    public void loss(String a, String b, int percent) {
        if (percent < 0 || percent > 100) {
            throw new IllegalArgumentException("percent 0..100, not " + percent);
        }
        set(a, b, percent);
    }

    /** A {@link DelayRelay} in a server node, listening on relayPort, for connections from client to port. */
    private record Relay(String client, String server, int port, int relayPort, Process process,
            PrintStream control, BufferedReader answers) {
    }

    /**
     * Delays TCP from {@code client} to {@code server:port} by {@code millis} ms each way (a round trip takes
     * 2 x millis longer). The first call for a client, server and port starts a {@link DelayRelay} in
     * {@code server}'s node and redirects there (nftables, table {@value #DELAY_TABLE}) every connection
     * {@code client} opens to {@code server:port} from then on; connections open before stay direct and undelayed.
     * Later calls change the delay of everything the relay carries, at once. The server sees the relay's connections,
     * from its own address.
     */
    public synchronized void delay(String client, String server, int port, int millis) throws IOException {
        pair(client, server);
        if (millis < 0) {
            throw new IllegalArgumentException("a delay of " + millis + " ms");
        }
        Relay r = relays.get(client + ">" + server + ":" + port);
        if (r != null) {
            r.control.println(millis);
            String ack = r.control.checkError() ? null : r.answers.readLine();
            if (!("delay " + millis).equals(ack)) {
                throw new IllegalStateException("the delay relay in " + server + " answered " + ack + " (log in "
                        + dir + ")");
            }
            return;
        }
        List<String> jvm = List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:+UseSerialGC", "-Xmx64m", "-cp", System.getProperty("java.class.path"),
                DelayRelay.class.getName(), address(server), String.valueOf(port), String.valueOf(millis));
        Process p = start(new ProcessBuilder(command(server, jvm)).redirectError(dir.resolve("delay-" + client + "-"
                + server + "-" + port + ".log").toFile()));
        BufferedReader answers = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        String ready = answers.readLine();
        if (ready == null || !ready.startsWith("ready ")) {
            p.destroyForcibly();
            throw new IllegalStateException("the delay relay in " + server + " said " + ready + " (log in "
                    + dir + ")");
        }
        r = new Relay(client, server, port, Integer.parseInt(ready.substring(6).strip()), p,
                new PrintStream(p.getOutputStream(), true, StandardCharsets.UTF_8), answers);
        relays.put(client + ">" + server + ":" + port, r);
        // Only ever added: removing a family's last nat hook makes the kernel drop the NAT of every connection it
        // set up, which resets the ones a relay carries (seen here with a deleted table). Only a SYN is redirected:
        // conntrack, enabled in the namespace by the first nat rule, picks up a connection already open mid-stream
        // as new, and redirecting that would reset it too (also seen).
        nft(node(server), "table inet " + DELAY_TABLE + " {\n"
                + "  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n  }\n}\n"
                + "add rule inet " + DELAY_TABLE + " prerouting ip saddr " + address(client) + " ip daddr "
                + address(server) + " tcp dport " + port + " tcp flags & (syn | ack) == syn redirect to :"
                + r.relayPort + "\n");
    }

    /** Sets a {@link #delay} back to 0 ms; its relay keeps carrying its connections and takes new ones. */
    public void undelay(String client, String server, int port) throws IOException {
        if (relays.containsKey(client + ">" + server + ":" + port)) {
            delay(client, server, port, 0);
        }
    }

    /** The share of packets now dropped between two nodes (0 when whole, 100 when cut). */
    public int dropPercent(String a, String b) {
        return dropPercent.getOrDefault(pair(a, b), 0);
    }

    private String pair(String a, String b) {
        node(a);
        node(b);
        if (a.equals(b)) {
            throw new IllegalArgumentException("a node cannot be cut from itself: " + a);
        }
        return a.compareTo(b) < 0 ? a + "|" + b : b + "|" + a;
    }

    private synchronized void set(String a, String b, int percent) {
        String key = pair(a, b);
        if (percent == 0) {
            dropPercent.remove(key);
        } else {
            dropPercent.put(key, percent);
        }
        nft(prefix + "hub", ruleset());
    }

    /** The hub's whole table: each faulty pair's rules, both ways, replacing what it held in one transaction. */
    private String ruleset() {
        StringBuilder rules = new StringBuilder();
        for (Map.Entry<String, Integer> e : dropPercent.entrySet()) {
            String[] ab = e.getKey().split("\\|");
            String verdict = e.getValue() >= 100 ? "counter drop"
                    : "numgen random mod 100 < " + e.getValue() + " counter drop";
            for (int way = 0; way < 2; way++) {
                rules.append("    ip saddr ").append(address(ab[way])).append(" ip daddr ").append(address(ab[1 - way]))
                        .append(' ').append(verdict).append('\n');
            }
        }
        return "table bridge " + TABLE + "\n"
                + "delete table bridge " + TABLE + "\n"
                + "table bridge " + TABLE + " {\n"
                + "  chain forward {\n    type filter hook forward priority 0; policy accept;\n" + rules + "  }\n"
                + "}\n";
    }

    /** {@code nft list table} of the hub, with the rules' counters (for failure messages). */
    public String rules() {
        return check(List.of("ip", "netns", "exec", prefix + "hub", "nft", "list", "table", "bridge", TABLE));
    }

    private static void nft(String ns, String script) {
        Result r = run(30, List.of("ip", "netns", "exec", ns, "nft", "-f", "-"), script);
        if (r.code != 0) {
            throw new IllegalStateException("nft -f in " + ns + " failed (" + r.code + "): " + r.out + "\n" + script);
        }
    }

    private static void ip(String ns, String... args) {
        List<String> cmd = new ArrayList<>(List.of("ip", "-n", ns));
        cmd.addAll(List.of(args));
        check(cmd);
    }

    // ------------------------------------------------------------------------------------------------ close

    /** Kills every process started in the lab (and waits for it), then deletes every namespace of the lab. */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        for (Process p : started) {
            p.descendants().forEach(ProcessHandle::destroyForcibly);
            p.destroyForcibly();
        }
        for (Process p : started) {
            try {
                p.waitFor(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        List<String> failed = new ArrayList<>();
        List<String> gone = new ArrayList<>(namespaces);
        Collections.reverse(gone);
        for (String ns : gone) {
            Result r = runQuietly(30, List.of("ip", "netns", "del", ns));
            if (r.code != 0) {
                failed.add(ns + ": " + r.out.strip());
            }
        }
        OPEN.remove(this);
        if (!failed.isEmpty()) {
            throw new IllegalStateException("could not delete namespaces " + failed);
        }
    }

    // ------------------------------------------------------------------------------------------------ commands

    private record Result(int code, String out) {
    }

    private static String check(List<String> cmd) {
        Result r = run(30, cmd, null);
        if (r.code != 0) {
            throw new IllegalStateException(String.join(" ", cmd) + " failed (" + r.code + "): " + r.out);
        }
        return r.out;
    }

    private static Result runQuietly(long seconds, List<String> cmd) {
        try {
            return run(seconds, cmd, null);
        } catch (UncheckedIOException e) {
            return new Result(-1, e.getCause().getMessage());
        }
    }

    private static Result run(long seconds, List<String> cmd, String input) {
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            try (var stdin = p.getOutputStream()) {
                if (input != null) {
                    stdin.write(input.getBytes(StandardCharsets.UTF_8));
                }
            }
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!p.waitFor(seconds, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                return new Result(-1, String.join(" ", cmd) + " did not end within " + seconds + " s: " + out);
            }
            return new Result(p.exitValue(), out);
        } catch (IOException e) {
            throw new UncheckedIOException(String.join(" ", cmd), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }
}
