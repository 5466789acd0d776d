package dev.rbridge.rdma;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A JVM a test starts on its own class path, as a peer it stops (SIGSTOP, SIGCONT) and kills (SIGKILL) for real. The
 * child says it is ready by creating a file ({@link #start}); {@link #close} lets a stopped child go on, then kills it.
 * rdma's tests run their listener in one; memserver's, a memserver (through rdma's test jar).
 */
public final class ChildJvm implements AutoCloseable {
    /** How long a child may take to say it is ready. */
    private static final Duration READY_WITHIN = Duration.ofSeconds(30);
    /** How long every thread of a child may take to show it stopped after SIGSTOP. */
    private static final Duration STOPPED_WITHIN = Duration.ofSeconds(5);
    /** How long a killed child may take to be gone. */
    private static final Duration GONE_WITHIN = Duration.ofSeconds(10);

    private final String what;
    private final Process process;

    private ChildJvm(String what, Process process) {
        this.what = what;
        this.process = process;
    }

    /**
     * The command that runs {@code main} with {@code args} in a JVM like this test's: its java and class path, native
     * access, 256 MiB of heap, and {@code jvmArgs} (a small -XX:MaxDirectMemorySize, say).
     */
    public static List<String> command(List<String> jvmArgs, Class<?> main, List<String> args) {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-Xmx256m"));
        cmd.addAll(jvmArgs);
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), main.getName()));
        cmd.addAll(args);
        return cmd;
    }

    /**
     * Starts {@code builder} (a {@link #command}, its output sent to {@code log}) and waits for the child to create
     * {@code readyFile}. A child that ends first, or is not ready within 30 s, is killed, and the exception carries its
     * log.
     *
     * @param what the child as messages name it ("memserver", say)
     */
    public static ChildJvm start(String what, ProcessBuilder builder, Path readyFile, Path log)
            throws IOException, InterruptedException {
        Process p = builder.start();
        long deadline = System.nanoTime() + READY_WITHIN.toNanos();
        while (!Files.exists(readyFile)) {
            if (!p.isAlive() || System.nanoTime() - deadline > 0) {
                p.destroyForcibly();
                throw new IOException(what + " did not start; its log:\n" + Files.readString(log));
            }
            Thread.sleep(20);
        }
        return new ChildJvm(what, p);
    }

    public Process process() {
        return process;
    }

    /** SIGKILL, and waits for the child to be gone. */
    public void kill() throws InterruptedException {
        process.destroyForcibly();
        process.waitFor(GONE_WITHIN.toMillis(), TimeUnit.MILLISECONDS);
    }

    /** Sends signal {@code name} (STOP, CONT, ...); after STOP, returns once every thread of the child has stopped. */
    public void signal(String name) throws IOException, InterruptedException {
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
        long deadline = System.nanoTime() + STOPPED_WITHIN.toNanos();
        while (System.nanoTime() - deadline < 0) {
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
        throw new IllegalStateException(what + " " + process.pid() + " did not stop within "
                + STOPPED_WITHIN.toSeconds() + " s of SIGSTOP");
    }

    /** Lets a stopped child go on (so that it can die), then kills it. */
    @Override
    public void close() throws IOException, InterruptedException {
        if (process.isAlive()) {
            signal("CONT");
            kill();
        }
    }
}
