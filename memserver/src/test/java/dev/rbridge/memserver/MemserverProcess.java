package dev.rbridge.memserver;

import dev.rbridge.rdma.ChildJvm;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/** A memserver JVM started by a test, with the signals a test needs: SIGKILL, SIGSTOP, SIGCONT. */
final class MemserverProcess implements AutoCloseable {
    private final ChildJvm jvm;
    final Process process;
    final InetSocketAddress address;
    /** Where the memserver's own counters are read (see {@link StandaloneMemserver}). */
    final InetSocketAddress stats;
    final String token;
    final Path log;
    /** The memserver's answers to {@link #revoke} (its stdout; its log goes to {@link #log}). */
    private final BufferedReader answers;

    private MemserverProcess(ChildJvm jvm, InetSocketAddress address, InetSocketAddress stats, String token,
            Path log) {
        this.jvm = jvm;
        this.process = jvm.process();
        this.address = address;
        this.stats = stats;
        this.token = token;
        this.log = log;
        this.answers = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
    }

    static MemserverProcess start(long capacity, String token) throws IOException, InterruptedException {
        return start(capacity, token, "tcp");
    }

    /**
     * A memserver on {@code transport}. For ucx the JVM gets what the launcher gives it (native access, UCX's signal
     * handlers off) and UCX_TLS=tcp unless the environment chose otherwise: this host has no RDMA device, and without
     * it two local processes would quietly use shared memory.
     */
    static MemserverProcess start(long capacity, String token, String transport)
            throws IOException, InterruptedException {
        return start(capacity, token, transport, List.of());
    }

    /** As {@link #start(long, String, String)}, with more JVM options (a small -XX:MaxDirectMemorySize, say). */
    static MemserverProcess start(long capacity, String token, String transport, List<String> jvmArgs)
            throws IOException, InterruptedException {
        return start(capacity, token, transport, jvmArgs, null);
    }

    /** As {@link #start(long, String, String, List)}, with another hello timeout than the memserver's, or null. */
    static MemserverProcess start(long capacity, String token, String transport, List<String> jvmArgs,
            Duration helloTimeout) throws IOException, InterruptedException {
        Path dir = Files.createTempDirectory("memserver");
        Path portFile = dir.resolve("port");
        Path log = dir.resolve("memserver.log");
        List<String> args = new ArrayList<>(List.of(portFile.toString(), String.valueOf(capacity), token, transport));
        if (helloTimeout != null) {
            args.add(String.valueOf(helloTimeout.toMillis()));
        }
        ProcessBuilder pb = new ProcessBuilder(ChildJvm.command(jvmArgs, StandaloneMemserver.class, args));
        ucxEnvironment(pb.environment());
        ChildJvm jvm = ChildJvm.start("memserver", pb.redirectError(log.toFile()), portFile, log);
        String[] ports = Files.readString(portFile).trim().split(" ");
        return new MemserverProcess(jvm, new InetSocketAddress("127.0.0.1", Integer.parseInt(ports[0])),
                new InetSocketAddress("127.0.0.1", Integer.parseInt(ports[1])), token, log);
    }

    /** The memserver's own counters (see {@link StandaloneMemserver}), by name. */
    Map<String, Long> counters() throws IOException, InterruptedException {
        HttpClient http = HttpClient.newHttpClient();
        HttpResponse<String> response = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:"
                + stats.getPort() + "/")).timeout(Duration.ofSeconds(10)).build(),
                HttpResponse.BodyHandlers.ofString());
        Map<String, Long> out = new TreeMap<>();
        for (String line : response.body().split("\n")) {
            String[] f = line.split(" ");
            if (f.length == 2) {
                out.put(f[0], Long.parseLong(f[1]));
            }
        }
        return out;
    }

    /** Peers the memserver turned away, by reason. */
    Map<String, Long> refused() throws IOException, InterruptedException {
        Map<String, Long> out = new TreeMap<>();
        counters().forEach((k, v) -> {
            if (k.startsWith("refused.")) {
                out.put(k.substring("refused.".length()), v);
            }
        });
        return out;
    }

    /** RAM backing the memserver's regions now. */
    long residentBytes() throws IOException, InterruptedException {
        return counters().get("resident_bytes");
    }

    /** Regions released or revoked whose memory is still mapped (pinned), counted against the capacity. */
    long lingeringBytes() throws IOException, InterruptedException {
        return counters().get("lingering_bytes");
    }

    /**
     * An operator's revoke, asked on the process's stdin ({@link StandaloneMemserver}'s stand-in for the admin
     * interface, which lives in ops); returns once the memserver has revoked the region.
     */
    synchronized void revoke(long regionId) throws IOException, InterruptedException {
        OutputStream requests = process.getOutputStream();
        requests.write(("revoke " + regionId + "\n").getBytes(StandardCharsets.UTF_8));
        requests.flush();
        String answer;
        try {
            answer = CompletableFuture.supplyAsync(() -> {
                try {
                    return answers.readLine();
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            }).get(10, TimeUnit.SECONDS);
        } catch (ExecutionException | TimeoutException e) {
            throw new IOException("revoke of region " + regionId + ": no answer from the memserver: " + e, e);
        }
        if (!("revoked " + regionId).equals(answer)) {
            throw new IOException("revoke of region " + regionId + ": " + answer);
        }
    }

    /** What a JVM that may use UCX needs in its environment (the ./rbridge launcher sets the same). */
    static void ucxEnvironment(java.util.Map<String, String> env) {
        env.putIfAbsent("UCX_ERROR_SIGNALS", "");
        env.putIfAbsent("UCX_TLS", "tcp");
    }

    void kill() throws InterruptedException {
        jvm.kill(); // SIGKILL
    }

    /** SIGSTOP (returning once every thread has stopped), SIGCONT, ... */
    void signal(String name) throws IOException, InterruptedException {
        jvm.signal(name);
    }

    String logText() throws IOException {
        return Files.readString(log);
    }

    @Override
    public void close() throws Exception {
        jvm.close();
    }
}
