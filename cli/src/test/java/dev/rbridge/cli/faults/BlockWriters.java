package dev.rbridge.cli.faults;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Writer threads, each on an NBD connection of its own, writing a volume's 1 MiB blocks with a {@link BlockPattern}
 * (so as many writes are in flight as there are threads): thread t takes blocks t, t + N, t + 2N, ... Either one pass
 * over the volume, or pass after pass until {@link #stop()}; a thread also stops at the first failed write, so a
 * fenced bridge's writers end with their first EIO.
 */
final class BlockWriters implements AutoCloseable {
    private final List<NbdWriteConnection> connections;
    private final List<Thread> threads = new ArrayList<>();
    private final AtomicLong acked = new AtomicLong();
    private final Map<Integer, Long> errors = new TreeMap<>();
    private final List<String> failures = new CopyOnWriteArrayList<>();
    private volatile boolean stopping;

    private BlockWriters(List<NbdWriteConnection> connections) {
        this.connections = connections;
    }

    /**
     * Connects {@code threads} writers to {@code uri} and starts them on blocks {@code 0..blocks-1}: once, or until
     * {@link #stop()} when {@code repeat}. Replies are waited for at most {@code replyTimeout}.
     */
    static BlockWriters start(String uri, BlockPattern pattern, int blocks, int threads, boolean repeat,
            Duration replyTimeout) throws IOException {
        List<NbdWriteConnection> connections = new ArrayList<>();
        try {
            for (int t = 0; t < threads; t++) {
                connections.add(NbdWriteConnection.open(uri, replyTimeout));
            }
        } catch (IOException | RuntimeException e) {
            connections.forEach(NbdWriteConnection::close);
            throw e;
        }
        BlockWriters w = new BlockWriters(connections);
        byte[][] data = new byte[blocks][];
        for (int b = 0; b < blocks; b++) {
            data[b] = pattern.block(b);
        }
        for (int t = 0; t < threads; t++) {
            int first = t;
            NbdWriteConnection c = connections.get(t);
            w.threads.add(Thread.ofPlatform().name("writer-" + pattern.writer() + "-" + t).daemon()
                    .start(() -> w.run(c, data, first, threads, repeat)));
        }
        return w;
    }

    private void run(NbdWriteConnection c, byte[][] data, int first, int stride, boolean repeat) {
        try {
            do {
                for (int b = first; b < data.length && !stopping; b += stride) {
                    int error = c.write((long) b * BlockPattern.BLOCK, data[b]);
                    if (error != 0) {
                        synchronized (errors) {
                            errors.merge(error, 1L, Long::sum);
                        }
                        return;
                    }
                    acked.incrementAndGet();
                }
            } while (repeat && !stopping);
        } catch (IOException e) {
            failures.add(Thread.currentThread().getName() + ": " + e);
        }
    }

    /** Writes acknowledged (reply without error) so far. */
    long acked() {
        return acked.get();
    }

    /** Waits until {@code n} writes are acknowledged; fails if a writer failed first or the time is up. */
    void awaitAcked(long n, Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (acked.get() < n) {
            if (!failures.isEmpty() || !errors().isEmpty()) {
                throw new AssertionError("a writer failed: " + describe());
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError(acked.get() + " of " + n + " writes acknowledged within " + timeout);
            }
            Thread.sleep(5);
        }
    }

    /** Each writer ends once the write it is waiting for is answered. */
    void stop() {
        stopping = true;
    }

    /** True when every writer has ended within {@code timeout}. */
    boolean join(Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        for (Thread t : threads) {
            long left = deadline - System.nanoTime();
            if (left <= 0 || !t.join(Duration.ofNanos(left))) {
                return false;
            }
        }
        return true;
    }

    /** Failed writes by NBD error number. */
    Map<Integer, Long> errors() {
        synchronized (errors) {
            return new TreeMap<>(errors);
        }
    }

    /** Writers that ended on a connection error (closed, reset, no reply in time). */
    List<String> failures() {
        return List.copyOf(failures);
    }

    String describe() {
        return acked.get() + " acknowledged, errors by errno " + errors() + ", connection failures " + failures;
    }

    /** Stops the writers, closes their connections (ending writes blocked on a full socket) and waits for them. */
    @Override
    public void close() throws InterruptedException {
        stopping = true;
        connections.forEach(NbdWriteConnection::close);
        for (Thread t : threads) {
            t.join(TimeUnit.SECONDS.toMillis(10));
        }
    }
}
