package dev.rbridge.cli.adversarial;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A well-behaved HTTP client: asks each target in turn on a fresh connection (as curl does), every 200 ms, and
 * keeps every failure and the slowest answer. Each request has 2 s to connect and 2 s per read.
 */
final class WellBehavedHttpClient implements AutoCloseable {
    record Target(String label, String address, String path, String token) {
    }

    private final List<Target> targets;
    private final Thread thread;
    private final List<String> failures = new CopyOnWriteArrayList<>();
    private final AtomicLong slowestNanos = new AtomicLong();
    private final AtomicLong rounds = new AtomicLong();
    private volatile String slowest = "";
    private volatile boolean running = true;

    WellBehavedHttpClient(List<Target> targets) {
        this.targets = List.copyOf(targets);
        this.thread = Thread.ofPlatform().daemon().name("well-behaved-http").start(this::run);
    }

    private void run() {
        while (running) {
            for (Target t : targets) {
                poll(t);
            }
            rounds.incrementAndGet();
            try {
                Thread.sleep(200);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    private void poll(Target t) {
        long t0 = System.nanoTime();
        String outcome;
        try (Socket s = new Socket()) {
            s.connect(address(t.address()), 2000);
            s.setSoTimeout(2000);
            String request = "GET " + t.path() + " HTTP/1.1\r\nHost: " + t.address() + "\r\nConnection: close\r\n"
                    + (t.token() == null ? "" : "Authorization: Bearer " + t.token() + "\r\n") + "\r\n";
            s.getOutputStream().write(request.getBytes(StandardCharsets.US_ASCII));
            byte[] answer = s.getInputStream().readAllBytes();
            String text = new String(answer, StandardCharsets.UTF_8);
            outcome = text.startsWith("HTTP/1.1 200 ") ? null
                    : "answered " + text.substring(0, Math.min(200, text.length())).replace("\r\n", " | ");
        } catch (IOException e) {
            outcome = e.toString();
        }
        long took = System.nanoTime() - t0;
        if (took > slowestNanos.get()) {
            slowestNanos.set(took);
            slowest = t.label();
        }
        if (outcome != null) {
            failures.add(t.label() + ": " + outcome + " after " + TimeUnit.NANOSECONDS.toMillis(took) + " ms");
        }
    }

    void reset() {
        failures.clear();
        slowestNanos.set(0);
        slowest = "";
    }

    void awaitRounds(int n, Duration timeout) throws InterruptedException {
        long target = rounds.get() + n;
        long deadline = System.nanoTime() + timeout.toNanos();
        while (rounds.get() < target && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        assertTrue(rounds.get() >= target, "the well-behaved HTTP client did not finish " + n + " rounds in "
                + timeout + "; failures " + failures);
    }

    void assertServedWithin(Duration max) {
        assertTrue(failures.isEmpty(), "the well-behaved HTTP client failed: " + failures);
        long ms = TimeUnit.NANOSECONDS.toMillis(slowestNanos.get());
        assertTrue(ms <= max.toMillis(), "the well-behaved HTTP client waited " + ms + " ms for " + slowest);
    }

    /** {@code HOST:PORT} as the ops endpoints print it. */
    static InetSocketAddress address(String hostPort) {
        int colon = hostPort.lastIndexOf(':');
        return new InetSocketAddress(hostPort.substring(0, colon), Integer.parseInt(hostPort.substring(colon + 1)));
    }

    @Override
    public void close() throws InterruptedException {
        running = false;
        thread.interrupt();
        thread.join(10_000);
    }
}
