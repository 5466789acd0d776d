package dev.rbridge.cli.history;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A {@link BlockTarget} that is a real NBD client: libnbd (its Python binding, {@code python3-libnbd}) in a child
 * process of its own, one NBD connection, driven over its stdin and stdout one request at a time.
 *
 * <p>Every operation has a deadline ({@link #DEFAULT_TIMEOUT}): when it passes, the child is killed and the
 * operation fails. Any failure (an NBD error reply, a dropped connection, the deadline) ends the child; the next
 * operation starts a new one, which connects anew, within that operation's deadline. So a workload keeps going across
 * a bridge that restarts, hangs or refuses, and a hung server costs one deadline per operation, never a hung test.
 * The times a history records around these calls include the pipe to the child, which only widens each interval: a
 * checker can then accept more, never reject a correct device.
 */
public final class LibnbdTarget implements BlockTarget {
    /** Long enough for a bridge to fail over a lost memserver (the fault tests' timeout is 5 s). */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(15);
    private static final int MAX_LINE = 4096;
    private static final ScheduledExecutorService WATCHDOG = Executors.newSingleThreadScheduledExecutor(
            r -> Thread.ofPlatform().daemon().name("libnbd-target-watchdog").unstarted(r));

    /**
     * The child: connects to argv[1], says "ready" (or "err ..." and exits), then serves "w OFFSET LENGTH\n" followed
     * by LENGTH bytes with "ok\n", and "r OFFSET LENGTH\n" with "ok\n" followed by LENGTH bytes; an NBD error is
     * "err MESSAGE\n". It exits when its stdin closes (so it never outlives the test JVM).
     */
    private static final String CLIENT = """
            import sys
            out = sys.stdout.buffer
            def say(line):
                out.write(line.replace("\\n", " ").encode("utf-8", "replace") + b"\\n")
                out.flush()
            try:
                import nbd
                h = nbd.NBD()
                h.connect_uri(sys.argv[1])
            except Exception as e:
                say("err connect: %s" % e)
                sys.exit(1)
            say("ready")
            inp = sys.stdin.buffer
            while True:
                line = inp.readline()
                if not line:
                    break
                op, offset, length = line.split()
                offset, length = int(offset), int(length)
                try:
                    if op == b"w":
                        data = inp.read(length)
                        if len(data) != length:
                            break
                        h.pwrite(data, offset)
                        say("ok")
                    else:
                        data = h.pread(length, offset)
                        out.write(b"ok\\n" + data)
                        out.flush()
                except nbd.Error as e:
                    say("err %s" % e)
            """;

    private final String uri;
    private final Duration timeout;
    private final List<String> launcher;
    private volatile Process process;
    private OutputStream toChild;
    private InputStream fromChild;

    private LibnbdTarget(String uri, Duration timeout, List<String> launcher) {
        this.uri = uri;
        this.timeout = timeout;
        this.launcher = List.copyOf(launcher);
    }

    /** Targets on {@code uri} (such as {@code nbd://127.0.0.1:10809/disk}) with the default deadline. */
    public static Connector connector(String uri) {
        return connector(uri, DEFAULT_TIMEOUT);
    }

    /** Targets on {@code uri}, each operation failing after {@code timeout}. Connecting happens on first use. */
    public static Connector connector(String uri, Duration timeout) {
        return connector(uri, timeout, List.of());
    }

    /**
     * As {@link #connector(String, Duration)}, the child started through {@code launcher}, a command that runs the
     * rest of its arguments (such as {@code ip netns exec NODE}, to run the client in a network namespace).
     */
    public static Connector connector(String uri, Duration timeout, List<String> launcher) {
        return () -> new LibnbdTarget(uri, timeout, launcher);
    }

    @Override
    public void write(long offset, byte[] data) throws IOException {
        call('w', offset, data.length, data);
    }

    @Override
    public byte[] read(long offset, int length) throws IOException {
        return call('r', offset, length, null);
    }

    private synchronized byte[] call(char op, long offset, int length, byte[] data) throws IOException {
        AtomicBoolean expired = new AtomicBoolean();
        ScheduledFuture<?> watchdog = WATCHDOG.schedule(() -> {
            expired.set(true);
            Process p = process;
            if (p != null) {
                p.destroyForcibly();
            }
        }, timeout.toMillis(), TimeUnit.MILLISECONDS);
        try {
            if (process == null) {
                start(expired);
            }
            toChild.write((op + " " + offset + " " + length + "\n").getBytes(StandardCharsets.US_ASCII));
            if (data != null) {
                toChild.write(data);
            }
            toChild.flush();
            String reply = readLine();
            if (!reply.equals("ok")) {
                throw new IOException(reply.startsWith("err ") ? reply.substring(4) : "libnbd client said " + reply);
            }
            if (data != null) {
                return null;
            }
            byte[] bytes = fromChild.readNBytes(length);
            if (bytes.length != length) {
                throw new EOFException("the libnbd client exited after " + bytes.length + " of " + length + " bytes");
            }
            return bytes;
        } catch (IOException e) {
            close();
            throw expired.get() ? new IOException("no answer within " + timeout.toMillis() + " ms", e) : e;
        } finally {
            watchdog.cancel(false);
        }
    }

    private void start(AtomicBoolean expired) throws IOException {
        List<String> command = new ArrayList<>(launcher);
        command.addAll(List.of("/usr/bin/python3", "-I", "-u", "-c", CLIENT, uri));
        Process p = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.DISCARD).start();
        process = p;
        toChild = new BufferedOutputStream(p.getOutputStream(), 1 << 16);
        fromChild = new BufferedInputStream(p.getInputStream(), 1 << 16);
        if (expired.get()) {
            throw new IOException("expired while starting the libnbd client");
        }
        String hello = readLine();
        if (!hello.equals("ready")) {
            throw new IOException(hello.startsWith("err ") ? hello.substring(4) : "libnbd client said " + hello);
        }
    }

    private String readLine() throws IOException {
        ByteArrayOutputStream line = new ByteArrayOutputStream();
        while (true) {
            int b = fromChild.read();
            if (b < 0) {
                throw new EOFException("the libnbd client exited"
                        + (line.size() > 0 ? " after " + line.toString(StandardCharsets.UTF_8) : ""));
            }
            if (b == '\n') {
                return line.toString(StandardCharsets.UTF_8);
            }
            if (line.size() >= MAX_LINE) {
                throw new IOException("the libnbd client sent a line longer than " + MAX_LINE + " bytes");
            }
            line.write(b);
        }
    }

    @Override
    public void close() {
        Process p = process;
        process = null;
        if (p != null) {
            p.destroyForcibly();
        }
    }
}
