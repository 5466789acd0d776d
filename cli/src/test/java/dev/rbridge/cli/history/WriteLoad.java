package dev.rbridge.cli.history;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Writes only: N threads, writer ids {@code firstWriter} to {@code firstWriter + N - 1}, each on its own connection,
 * write new {@link BlockVersion}s to random blocks of a range one request at a time until {@link #stop()}, recorded in
 * a {@link History} of their own. For a second set of clients (another bridge's) next to a {@link VersionedWorkload},
 * whose writers are 1 to n: with ids of its own, every version read names which set wrote it. A write that fails is
 * recorded as failed and the thread goes on (its target reconnects) after {@link #PAUSE_AFTER_FAILURE}, so the load
 * keeps pressing on a device that hangs or refuses without spinning on one that refuses at once.
 */
public final class WriteLoad {
    /** How long a thread waits after a failed write: a refused write costs a new client process. */
    public static final Duration PAUSE_AFTER_FAILURE = Duration.ofMillis(100);
    private final History history = new History();
    private final AtomicBoolean stop = new AtomicBoolean();
    private final AtomicReference<Throwable> crash = new AtomicReference<>();
    private final List<Thread> threads = new ArrayList<>();

    private WriteLoad() {}

    /**
     * Starts {@code writers} threads writing blocks {@code first} to {@code first + count - 1} of {@code blockBytes}
     * bytes (a multiple of 4096) through targets of {@code connector}.
     */
    public static WriteLoad start(BlockTarget.Connector connector, int firstWriter, int writers, long first,
            long count, int blockBytes, long seed) {
        if (writers < 1 || firstWriter < 1 || first < 0 || count < 1 || blockBytes < BlockVersion.MIN_BLOCK_BYTES
                || blockBytes % BlockVersion.MIN_BLOCK_BYTES != 0) {
            throw new IllegalArgumentException("writers " + firstWriter + "+" + writers + ", blocks " + first + "+"
                    + count + " of " + blockBytes + " bytes");
        }
        WriteLoad load = new WriteLoad();
        for (int w = firstWriter; w < firstWriter + writers; w++) {
            int writer = w;
            load.threads.add(Thread.ofPlatform().name("write-load-" + writer).daemon().start(() -> {
                try {
                    load.work(connector, writer, first, count, blockBytes, new SplittableRandom(seed * 31 + writer));
                } catch (Throwable t) {
                    load.crash.compareAndSet(null, t);
                }
            }));
        }
        return load;
    }

    private void work(BlockTarget.Connector connector, int writer, long first, long count, int blockBytes,
            SplittableRandom random) throws InterruptedException {
        long sequence = 0;
        BlockTarget target = null;
        try {
            while (!stop.get()) {
                long block = first + random.nextLong(count);
                BlockVersion version = new BlockVersion(writer, ++sequence);
                History.Pending p = history.invokeWrite(block, version);
                try {
                    if (target == null) {
                        target = connector.connect();
                    }
                    target.write(block * blockBytes, version.encode(block, blockBytes));
                    p.ok();
                } catch (IOException e) {
                    p.failed(String.valueOf(e.getMessage()));
                    Thread.sleep(PAUSE_AFTER_FAILURE);
                }
            }
        } finally {
            if (target != null) {
                target.close();
            }
        }
    }

    public History history() {
        return history;
    }

    /** Asks every thread to stop after the write it has in flight. */
    public void stop() {
        stop.set(true);
    }

    /**
     * Stops the threads and waits up to {@code millis} for them (a write in flight ends within its target's deadline);
     * false if one still runs. Throws what a thread threw if one crashed (a bug; an I/O error is recorded).
     */
    public boolean stopAndJoin(long millis) throws InterruptedException {
        stop();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        for (Thread t : threads) {
            long left = deadline - System.nanoTime();
            if (left <= 0 || !t.join(Duration.ofNanos(left))) {
                return false;
            }
        }
        Throwable t = crash.get();
        if (t != null) {
            throw new IllegalStateException("a write-load thread crashed", t);
        }
        return true;
    }
}
