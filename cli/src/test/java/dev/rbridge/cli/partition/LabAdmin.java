package dev.rbridge.cli.partition;

import dev.rbridge.cli.serve.ServeCluster;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;

/**
 * The operator of a {@link PartitionLab}'s rbridge processes: the shared token (a file in the lab's log folder, as
 * rbridge wants one off loopback), and each process's admin JSON, read from a {@link NetProbe} in its node through
 * its loopback, which no cut touches (one probe per node, started on first use, killed with the lab).
 */
final class LabAdmin {
    private static final int PROBE_PORT = 7000;
    private final PartitionLab lab;
    private final Path tokenFile;
    private final String secret;
    private final Map<String, NetProbe.Remote> probes = new HashMap<>();

    private LabAdmin(PartitionLab lab, Path tokenFile, String secret) {
        this.lab = lab;
        this.tokenFile = tokenFile;
        this.secret = secret;
    }

    /** A new random token, written to {@code token} in the lab's log folder. */
    static LabAdmin create(PartitionLab lab) throws IOException {
        String secret = HexFormat.of().formatHex(new SecureRandom().generateSeed(32));
        Path file = lab.logDir().resolve("token");
        Files.writeString(file, secret + "\n");
        return new LabAdmin(lab, file, secret);
    }

    /** {@code --token-file FILE}, for memservers and bridges. */
    String[] tokenArgs() {
        return new String[]{"--token-file", tokenFile.toString()};
    }

    /** The token file, for tools that read it ({@link ReplicaCompare}). */
    Path tokenFile() {
        return tokenFile;
    }

    /** GET {@code path} (such as {@code /volumes}) on a process's admin interface, parsed; anything but 200 throws. */
    Object get(LabRbridge process, String path) throws IOException {
        NetProbe.Remote probe;
        synchronized (probes) {
            probe = probes.get(process.node());
            if (probe == null) {
                probe = NetProbe.Remote.start(lab, process.node(), PROBE_PORT);
                probes.put(process.node(), probe);
            }
        }
        String r;
        synchronized (probe) {
            r = probe.ask("get " + process.adminUrl() + path.substring(1) + " " + secret);
        }
        if (!r.startsWith("http 200 ")) {
            throw new IllegalStateException("GET " + path + " on " + process.node() + ": " + r);
        }
        return ServeCluster.Json.parse(r.substring("http 200 ".length()));
    }

    /** The bridge's first volume, as {@code /volumes} shows it. */
    @SuppressWarnings("unchecked")
    Map<String, Object> volume(LabRbridge bridge) throws IOException {
        return ((List<Map<String, Object>>) get(bridge, "/volumes")).getFirst();
    }

    /** The bridge's state of a volume: healthy, degraded, fenced, ... */
    String volumeState(LabRbridge bridge) throws IOException {
        return String.valueOf(volume(bridge).get("state"));
    }

    @SuppressWarnings("unchecked")
    List<Map<String, Object>> slabs(LabRbridge bridge, String volume) throws IOException {
        return (List<Map<String, Object>>) get(bridge, "/volumes/" + volume + "/slabs");
    }

    /** The bridge's state of memserver {@code m}: up, down, ... */
    @SuppressWarnings("unchecked")
    String memserverState(LabRbridge bridge, LabRbridge m) throws IOException {
        List<Map<String, Object>> all = (List<Map<String, Object>>) get(bridge, "/memservers");
        for (Map<String, Object> s : all) {
            if (m.address().equals(s.get("memserver"))) {
                return String.valueOf(s.get("state"));
            }
        }
        throw new IllegalStateException("no memserver " + m.address() + " in " + all);
    }

    /** Whether memserver {@code m}'s {@code /leases} shows a live (held) lease on {@code volume}. */
    boolean leaseHeld(LabRbridge m, String volume) throws IOException {
        for (Object lease : (List<?>) get(m, "/leases")) {
            Map<?, ?> l = (Map<?, ?>) lease;
            if (volume.equals(l.get("volume")) && "held".equals(l.get("state"))) {
                return true;
            }
        }
        return false;
    }

    /** A condition polled by {@link #await}; an exception counts as not yet. */
    interface Check {
        boolean holds() throws IOException;
    }

    /**
     * Polls {@code check} every 100 ms until it holds; after {@code timeout} throws an AssertionError naming
     * {@code what}, the last exception and the tails of {@code logs}.
     */
    static void await(String what, Duration timeout, Check check, LabRbridge... logs) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        Exception last = null;
        while (System.nanoTime() < deadline) {
            try {
                if (check.holds()) {
                    return;
                }
            } catch (IOException | RuntimeException e) {
                last = e;
            }
            Thread.sleep(100);
        }
        StringBuilder b = new StringBuilder(what + " did not happen within " + timeout + (last == null ? ""
                : "; last error: " + last) + "\n");
        for (LabRbridge p : logs) {
            b.append(p.tails());
        }
        throw new AssertionError(b.toString());
    }
}
