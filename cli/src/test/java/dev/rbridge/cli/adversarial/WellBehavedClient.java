package dev.rbridge.cli.adversarial;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The client an attack must not hurt: a real libnbd client ({@code well_behaved.py}) that keeps writing, reading
 * back and checking 4 KiB blocks one request at a time, and opens a fresh connection every tenth cycle. This side
 * watches its output and keeps the longest time the client went without finishing a cycle; an attack passes only if
 * that gap stays short and nothing failed.
 *
 * <p>Typical use: {@code start}, {@code awaitCycles} (it is served before the attack), run the attack,
 * {@code assertServedWithin(2 s)} during and after it, {@code close}.
 */
public final class WellBehavedClient implements AutoCloseable {
    private final Process process;
    private final Thread reader;
    private final AtomicLong cycles = new AtomicLong();
    private final AtomicLong lastProgressNanos = new AtomicLong();
    private final AtomicLong longestGapNanos = new AtomicLong();
    private final List<String> errors = new CopyOnWriteArrayList<>();
    private final StringBuilder output = new StringBuilder();

    private WellBehavedClient(Process process) {
        this.process = process;
        lastProgressNanos.set(System.nanoTime());
        reader = Thread.ofPlatform().name("well-behaved-client").daemon().start(this::read);
    }

    /**
     * Starts the client on {@code uri}; it uses 1 MiB of the export from {@code baseBytes}, so an attack's own I/O
     * can stay out of that range.
     */
    public static WellBehavedClient start(String uri, long baseBytes) throws IOException {
        Process p = new ProcessBuilder("/usr/bin/python3", script().toString(), uri, String.valueOf(baseBytes))
                .redirectErrorStream(true).start();
        return new WellBehavedClient(p);
    }

    private static Path script() {
        try {
            return Paths.get(WellBehavedClient.class.getResource("/adversarial/well_behaved.py").toURI());
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    private void read() {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getInputStream(),
                StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                synchronized (output) {
                    output.append(line).append('\n');
                    if (output.length() > 16_384) {
                        output.delete(0, output.length() - 8_192);
                    }
                }
                if (line.startsWith("ok ")) {
                    progress();
                } else {
                    errors.add(line);
                }
            }
        } catch (IOException e) {
            errors.add("reading the client's output failed: " + e);
        }
    }

    private void progress() {
        long now = System.nanoTime();
        long gap = now - lastProgressNanos.getAndSet(now);
        longestGapNanos.accumulateAndGet(gap, Math::max);
        cycles.incrementAndGet();
    }

    /** Waits until the client has finished {@code n} more cycles; fails if it does not within {@code timeout}. */
    public void awaitCycles(int n, Duration timeout) throws InterruptedException {
        long target = cycles.get() + n;
        long deadline = System.nanoTime() + timeout.toNanos();
        while (cycles.get() < target && System.nanoTime() < deadline && errors.isEmpty() && process.isAlive()) {
            Thread.sleep(10);
        }
        assertTrue(cycles.get() >= target, "the well-behaved client finished " + (cycles.get() - target + n)
                + " of " + n + " cycles within " + timeout + "; " + describe());
    }

    /** Forgets the longest gap so far (e.g. the start-up before an attack begins). */
    public void resetLongestGap() {
        longestGapNanos.set(0);
        lastProgressNanos.set(System.nanoTime());
    }

    /** The longest time without a finished cycle since start or {@link #resetLongestGap}, the current wait included. */
    public Duration longestGap() {
        long open = System.nanoTime() - lastProgressNanos.get();
        return Duration.ofNanos(Math.max(longestGapNanos.get(), open));
    }

    public long cycles() {
        return cycles.get();
    }

    /** Fails if the client failed, stopped, or went longer than {@code max} without finishing a cycle. */
    public void assertServedWithin(Duration max) {
        assertTrue(errors.isEmpty(), "the well-behaved client failed: " + describe());
        assertTrue(process.isAlive(), "the well-behaved client exited: " + describe());
        Duration gap = longestGap();
        assertTrue(gap.compareTo(max) <= 0, "the well-behaved client waited " + gap.toMillis()
                + " ms for a cycle (at most " + max.toMillis() + " ms allowed); " + describe());
    }

    public String describe() {
        synchronized (output) {
            return cycles.get() + " cycles, longest gap " + longestGap().toMillis() + " ms, errors " + errors
                    + ", last output:\n" + output;
        }
    }

    @Override
    public void close() throws InterruptedException {
        process.destroy();
        if (!process.waitFor(5, TimeUnit.SECONDS)) {
            process.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
        }
        reader.join(5_000);
    }
}
