package dev.rbridge.cli.partition;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.ConnectException;
import java.net.DatagramPacket;
import java.net.DatagramSocket;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.BitSet;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A network probe that runs in a {@link PartitionLab} node as its own JVM ({@code java -cp TEST_CLASSPATH
 * dev.rbridge.cli.partition.NetProbe PORT}): it echoes TCP lines and UDP datagrams on {@code PORT} of every address,
 * prints {@code ready}, then answers commands from stdin, one result line each:
 * <ul>
 * <li>{@code connect HOST PORT MS}: opens a TCP connection (it stays, for {@code send}); prints {@code connected},
 * {@code timeout} (nothing answered: dropped) or {@code refused} (a reset came back).</li>
 * <li>{@code send TEXT MS}: writes a line on that connection and waits up to MS ms for its echo: {@code echo TEXT}
 * or {@code timeout}; {@code await MS} waits again for an echo still owed.</li>
 * <li>{@code udp HOST PORT N MS}: sends N numbered datagrams 1 ms apart, then waits up to MS ms after the last;
 * prints {@code replies K}, the number of distinct datagrams echoed back.</li>
 * <li>{@code get URL [TOKEN]}: an HTTP GET from inside the node (with {@code Authorization: Bearer TOKEN} if
 * given; 5 s timeouts): {@code http STATUS BODY}, the body's line breaks turned into spaces (a JSON document
 * keeps its meaning), or {@code error ...}.</li>
 * </ul>
 * {@link Remote} starts one in a node and talks to it from the test.
 */
public final class NetProbe {
    private Socket conn;
    private final StringBuilder pending = new StringBuilder();

    private NetProbe() {}

    public static void main(String[] args) throws IOException {
        int port = Integer.parseInt(args[0]);
        ServerSocket tcp = new ServerSocket(port);
        DatagramSocket udp = new DatagramSocket(port);
        Thread.ofPlatform().daemon().start(() -> acceptLoop(tcp));
        Thread.ofPlatform().daemon().start(() -> udpEcho(udp));
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        out.println("ready");
        NetProbe probe = new NetProbe();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null;) {
            String result;
            try {
                result = probe.command(line.strip().split(" "));
            } catch (IOException | RuntimeException e) {
                result = "error " + e;
            }
            out.println(result.replace('\n', ' '));
        }
        System.exit(0);
    }

    private String command(String[] w) throws IOException {
        return switch (w[0]) {
            case "connect" -> connect(w[1], Integer.parseInt(w[2]), Integer.parseInt(w[3]));
            case "send" -> send(w[1], Integer.parseInt(w[2]));
            case "await" -> awaitEcho(Integer.parseInt(w[1]));
            case "udp" -> udp(w[1], Integer.parseInt(w[2]), Integer.parseInt(w[3]), Integer.parseInt(w[4]));
            case "get" -> get(w[1], w.length > 2 ? w[2] : null);
            default -> "error unknown command " + w[0];
        };
    }

    private String connect(String host, int port, int millis) throws IOException {
        if (conn != null) {
            conn.close();
        }
        conn = null;
        pending.setLength(0);
        Socket s = new Socket();
        try {
            s.connect(new InetSocketAddress(host, port), millis);
            conn = s;
            return "connected";
        } catch (SocketTimeoutException e) {
            s.close();
            return "timeout";
        } catch (ConnectException e) {
            s.close();
            return e.getMessage() != null && e.getMessage().contains("timed out") ? "timeout" : "refused";
        }
    }

    private String send(String text, int millis) throws IOException {
        if (conn == null) {
            return "error not connected";
        }
        OutputStream o = conn.getOutputStream();
        o.write((text + "\n").getBytes(StandardCharsets.UTF_8));
        o.flush();
        return awaitEcho(millis);
    }

    /** Reads until a whole line is there or {@code millis} pass; a partial line stays for the next call. */
    private String awaitEcho(int millis) throws IOException {
        if (conn == null) {
            return "error not connected";
        }
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        InputStream in = conn.getInputStream();
        byte[] buf = new byte[4096];
        while (true) {
            int nl = pending.indexOf("\n");
            if (nl >= 0) {
                String line = pending.substring(0, nl);
                pending.delete(0, nl + 1);
                return "echo " + line;
            }
            long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
            if (left <= 0) {
                return "timeout";
            }
            conn.setSoTimeout((int) Math.max(1, left));
            try {
                int n = in.read(buf);
                if (n < 0) {
                    return "closed";
                }
                pending.append(new String(buf, 0, n, StandardCharsets.UTF_8));
            } catch (SocketTimeoutException e) {
                return "timeout";
            }
        }
    }

    private static String udp(String host, int port, int count, int millis) throws IOException {
        BitSet seen = new BitSet(count);
        try (DatagramSocket s = new DatagramSocket()) {
            Thread receiver = Thread.ofPlatform().daemon().start(() -> {
                byte[] buf = new byte[64];
                while (true) {
                    DatagramPacket p = new DatagramPacket(buf, buf.length);
                    try {
                        s.receive(p);
                    } catch (IOException e) {
                        return; // closed below
                    }
                    int i = p.getLength() == 4 ? ByteBuffer.wrap(buf, 0, 4).getInt() : -1;
                    if (i >= 0 && i < count) {
                        synchronized (seen) {
                            seen.set(i);
                        }
                    }
                }
            });
            InetAddress to = InetAddress.getByName(host);
            try {
                for (int i = 0; i < count; i++) {
                    byte[] b = ByteBuffer.allocate(4).putInt(i).array();
                    s.send(new DatagramPacket(b, b.length, to, port));
                    Thread.sleep(1);
                }
                long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
                while (System.nanoTime() < deadline && replies(seen) < count) {
                    Thread.sleep(5);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            s.close();
            receiver.interrupt();
        }
        return "replies " + replies(seen);
    }

    private static String get(String url, String token) throws IOException {
        try (HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build()) {
            HttpRequest.Builder req = HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(5)).GET();
            if (token != null) {
                req.header("Authorization", "Bearer " + token);
            }
            HttpResponse<String> r = http.send(req.build(), HttpResponse.BodyHandlers.ofString());
            return "http " + r.statusCode() + " " + r.body().replace('\r', ' ').replace('\n', ' ');
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException(e);
        }
    }

    private static int replies(BitSet seen) {
        synchronized (seen) {
            return seen.cardinality();
        }
    }

    private static void acceptLoop(ServerSocket server) {
        while (true) {
            try {
                Socket s = server.accept();
                Thread.ofPlatform().daemon().start(() -> echo(s));
            } catch (IOException e) {
                return;
            }
        }
    }

    private static void echo(Socket s) {
        try (s) {
            s.getInputStream().transferTo(s.getOutputStream());
        } catch (IOException e) {
            // the peer went away
        }
    }

    private static void udpEcho(DatagramSocket udp) {
        byte[] buf = new byte[64];
        while (true) {
            DatagramPacket p = new DatagramPacket(buf, buf.length);
            try {
                udp.receive(p);
                udp.send(new DatagramPacket(p.getData(), p.getLength(), p.getSocketAddress()));
            } catch (IOException e) {
                return;
            }
        }
    }

    // ------------------------------------------------------------------------------------------------ the driver

    /** A NetProbe running in a lab node, driven over its stdin and stdout. */
    public static final class Remote {
        private final Process process;
        private final BufferedReader out;
        private final PrintStream in;

        private Remote(Process process) {
            this.process = process;
            this.out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
            this.in = new PrintStream(process.getOutputStream(), true, StandardCharsets.UTF_8);
        }

        /** Starts a probe serving {@code port} in {@code node}; returns once it printed "ready". */
        public static Remote start(PartitionLab lab, String node, int port) throws IOException {
            List<String> jvm = List.of(
                    Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    "-XX:+UseSerialGC", "-Xmx64m", "-cp", System.getProperty("java.class.path"),
                    NetProbe.class.getName(), String.valueOf(port));
            Process p = lab.start(new ProcessBuilder(lab.command(node, jvm))
                    .redirectError(lab.logDir().resolve("netprobe-" + node + ".log").toFile()));
            Remote r = new Remote(p);
            String first = r.out.readLine();
            if (!"ready".equals(first)) {
                throw new IllegalStateException("the probe in " + node + " said " + first + " (log in "
                        + lab.logDir() + ")");
            }
            return r;
        }

        /** Sends one command and returns its result line (every command bounds its own wait). */
        public String ask(String command) throws IOException {
            if (!process.isAlive()) {
                throw new IllegalStateException("the probe exited with " + process.exitValue());
            }
            in.println(command);
            String line = out.readLine();
            if (line == null) {
                throw new IllegalStateException("the probe closed its output");
            }
            return line;
        }

        public boolean isAlive() {
            return process.isAlive();
        }

        public Process process() {
            return process;
        }
    }
}
