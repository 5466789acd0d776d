package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RemoteListener;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A tcp listener over {@link ArenaRegionServiceForTests} in a JVM of its own, for tests that stop the peer for real
 * (SIGSTOP, SIGCONT): the rdma module cannot start a memserver, which depends on it. {@link #main} is the child's entry
 * point (PORT_FILE TOKEN); {@link #start} runs it.
 */
final class TcpServerProcess implements AutoCloseable {
    final Process process;
    final InetSocketAddress address;

    private TcpServerProcess(Process process, InetSocketAddress address) {
        this.process = process;
        this.address = address;
    }

    public static void main(String[] args) throws Exception {
        RemoteListener listener = new TcpProvider().listen(new ListenParams()
                .address(new InetSocketAddress("127.0.0.1", 0)), new ArenaRegionServiceForTests(args[1]));
        Path tmp = Path.of(args[0] + ".tmp");
        Files.writeString(tmp, String.valueOf(listener.address().getPort()));
        Files.move(tmp, Path.of(args[0]));
        Thread.currentThread().join();
    }

    static TcpServerProcess start(String token) throws IOException, InterruptedException {
        Path dir = Files.createTempDirectory("tcp-server");
        Path portFile = dir.resolve("port");
        Path log = dir.resolve("server.log");
        Process p = new ProcessBuilder(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-Xmx256m", "-cp", System.getProperty("java.class.path"),
                TcpServerProcess.class.getName(), portFile.toString(), token))
                .redirectErrorStream(true).redirectOutput(log.toFile()).start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!Files.exists(portFile)) {
            if (!p.isAlive() || System.nanoTime() > deadline) {
                p.destroyForcibly();
                throw new IOException("the tcp server process did not start; its log:\n" + Files.readString(log));
            }
            Thread.sleep(20);
        }
        return new TcpServerProcess(p, new InetSocketAddress("127.0.0.1",
                Integer.parseInt(Files.readString(portFile).trim())));
    }

    void signal(String name) throws IOException, InterruptedException {
        new ProcessBuilder("kill", "-" + name, String.valueOf(process.pid())).inheritIO().start().waitFor();
        if (name.equals("STOP")) {
            awaitStopped();
        }
    }

    /**
     * A stop signal is only queued when kill returns; on a loaded host a thread of the target may still run for a
     * moment (and answer a request sent right after). Frozen means every thread shows state T.
     */
    private void awaitStopped() throws IOException, InterruptedException {
        Path tasks = Path.of("/proc", String.valueOf(process.pid()), "task");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (System.nanoTime() < deadline) {
            boolean all = true;
            try (var list = Files.list(tasks)) {
                for (Path t : (Iterable<Path>) list::iterator) {
                    String stat;
                    try {
                        stat = Files.readString(t.resolve("stat"));
                    } catch (IOException gone) {
                        continue; // a thread that just ended
                    }
                    char state = stat.charAt(stat.lastIndexOf(')') + 2);
                    if (state != 'T' && state != 't' && state != 'Z' && state != 'X') {
                        all = false;
                        break;
                    }
                }
            }
            if (all) {
                return;
            }
            Thread.sleep(5);
        }
        throw new IllegalStateException("process " + process.pid() + " did not stop within 5 s of SIGSTOP");
    }

    @Override
    public void close() throws Exception {
        if (process.isAlive()) {
            signal("CONT");
            process.destroyForcibly();
            process.waitFor(10, TimeUnit.SECONDS);
        }
    }
}
