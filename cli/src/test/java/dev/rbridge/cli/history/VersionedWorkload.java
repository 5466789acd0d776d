package dev.rbridge.cli.history;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A workload whose every write is a new {@link BlockVersion}, recorded in a {@link History} for
 * {@link RegisterChecker}: N threads, each with its own writer id, its own connection ({@link BlockTarget}) and
 * increasing sequence numbers, write and read random blocks of a range one request at a time, until a time or an
 * operation budget runs out or {@link Running#stop()}; then one pass reads every block of the range once. An operation
 * that fails is recorded as failed (a write's effect is then unknown), never thrown.
 *
 * <pre>
 * VersionedWorkload w = VersionedWorkload.builder(LibnbdTarget.connector(cluster.uri("disk")))
 *         .writers(4).blocks(0, 256).duration(Duration.ofSeconds(10)).build();
 * History h = w.run();                          // or: Running r = w.start(); ...faults...; History h = r.finish();
 * RegisterChecker.Result result = RegisterChecker.check(h);
 * assertTrue(result.ok(), result + "\n" + h.summary());
 * </pre>
 */
public final class VersionedWorkload {
    /** Failed reads in a row after which the final pass stops. */
    public static final int FINAL_PASS_GIVE_UP = 3;
    private final BlockTarget.Connector connector;
    private final int writers;
    private final long firstBlock;
    private final long blocks;
    private final int blockBytes;
    private final int readPercent;
    private final Duration duration;
    private final long maxOperations;
    private final long seed;

    private VersionedWorkload(Builder b) {
        this.connector = b.connector;
        this.writers = b.writers;
        this.firstBlock = b.firstBlock;
        this.blocks = b.blocks;
        this.blockBytes = b.blockBytes;
        this.readPercent = b.readPercent;
        this.duration = b.duration;
        this.maxOperations = b.maxOperations;
        this.seed = b.seed;
    }

    public static Builder builder(BlockTarget.Connector connector) {
        return new Builder(connector);
    }

    /** What to run; every setting has a default but the target. */
    public static final class Builder {
        private final BlockTarget.Connector connector;
        private int writers = 4;
        private long firstBlock;
        private long blocks = 256;
        private int blockBytes = BlockVersion.MIN_BLOCK_BYTES;
        private int readPercent = 50;
        private Duration duration = Duration.ofSeconds(10);
        private long maxOperations = Long.MAX_VALUE;
        private long seed = System.nanoTime();

        private Builder(BlockTarget.Connector connector) {
            this.connector = Objects.requireNonNull(connector, "connector");
        }

        /** Threads, each writer id 1..n with a connection of its own (default 4). */
        public Builder writers(int n) {
            writers = n;
            return this;
        }

        /** The blocks used: {@code count} blocks from block index {@code first} (default 0 and 256). */
        public Builder blocks(long first, long count) {
            firstBlock = first;
            blocks = count;
            return this;
        }

        /** The size of a block, a multiple of 4096 (default 4096); block i is at byte i times this. */
        public Builder blockBytes(int bytes) {
            blockBytes = bytes;
            return this;
        }

        /** The share of reads among the threads' operations, 0 to 100 (default 50). */
        public Builder readPercent(int percent) {
            readPercent = percent;
            return this;
        }

        /** How long the threads run at most (default 10 s); the final read pass comes after. */
        public Builder duration(Duration d) {
            duration = Objects.requireNonNull(d);
            return this;
        }

        /** How many operations the threads issue at most, all together (default: no limit). */
        public Builder maxOperations(long n) {
            maxOperations = n;
            return this;
        }

        /** The seed of the random choices (default: the clock); printed by {@link Running#toString()}. */
        public Builder seed(long s) {
            seed = s;
            return this;
        }

        public VersionedWorkload build() {
            if (writers < 1) {
                throw new IllegalArgumentException("writers must be at least 1, not " + writers);
            }
            if (firstBlock < 0 || blocks < 1) {
                throw new IllegalArgumentException("blocks: first " + firstBlock + " count " + blocks);
            }
            if (blockBytes < BlockVersion.MIN_BLOCK_BYTES || blockBytes % BlockVersion.MIN_BLOCK_BYTES != 0) {
                throw new IllegalArgumentException("blockBytes must be a multiple of 4096, not " + blockBytes);
            }
            if (readPercent < 0 || readPercent > 100) {
                throw new IllegalArgumentException("readPercent must be 0 to 100, not " + readPercent);
            }
            if (maxOperations < 0 || duration.isNegative()) {
                throw new IllegalArgumentException("maxOperations " + maxOperations + ", duration " + duration);
            }
            return new VersionedWorkload(this);
        }
    }

    /** Runs the threads to the end of the budget, then the final read pass; returns the whole history. */
    public History run() throws InterruptedException {
        Running r = start();
        r.awaitBudget();
        return r.finish();
    }

    /** Starts the threads in the background. */
    public Running start() {
        return new Running();
    }

    /** A workload under way. */
    public final class Running {
        private final History history = new History();
        private final AtomicBoolean stop = new AtomicBoolean();
        private final AtomicLong issued = new AtomicLong();
        private final AtomicReference<Throwable> crash = new AtomicReference<>();
        private final List<Thread> threads = new ArrayList<>();
        private final long deadline = System.nanoTime() + duration.toNanos();
        private final AtomicLong finalPassUnread = new AtomicLong(blocks);

        private Running() {
            for (int w = 1; w <= writers; w++) {
                int writer = w;
                threads.add(Thread.ofPlatform().name("versioned-writer-" + writer).daemon()
                        .start(() -> guard(() -> work(writer))));
            }
        }

        public History history() {
            return history;
        }

        /** Operations issued so far by the threads. */
        public long operations() {
            return issued.get();
        }

        /** Asks the threads to stop after the operation each has in flight. */
        public void stop() {
            stop.set(true);
        }

        /** Waits for the threads to run out of their time or operation budget (or be stopped). */
        public void awaitBudget() throws InterruptedException {
            for (Thread t : threads) {
                t.join();
            }
        }

        /**
         * Stops the threads, waits for them, reads every block once over a new connection and returns the history.
         * After {@value #FINAL_PASS_GIVE_UP} failed reads in a row the pass gives up (a hung device would otherwise
         * cost a deadline per block): {@link #finalPassUnread()} says how many blocks it did not read. Throws what a
         * thread threw if one crashed (a bug; an I/O error is recorded, not thrown).
         */
        public History finish() throws InterruptedException {
            stop();
            awaitBudget();
            rethrow();
            int failedInARow = 0;
            long read = 0;
            try (BlockTarget target = connect()) {
                for (long b = firstBlock; b < firstBlock + blocks && failedInARow < FINAL_PASS_GIVE_UP; b++) {
                    if (read(target, b)) {
                        read++;
                        failedInARow = 0;
                    } else {
                        failedInARow++;
                    }
                }
            }
            finalPassUnread.set(blocks - read);
            return history;
        }

        /**
         * Blocks the final pass did not read successfully: 0 when every block was read (a test that means to catch
         * a lost write should require that), {@code blocks} before {@link #finish()}.
         */
        public long finalPassUnread() {
            return finalPassUnread.get();
        }

        private void work(int writer) {
            SplittableRandom random = new SplittableRandom(seed * 31 + writer);
            long sequence = 0;
            try (BlockTarget target = connect()) {
                while (!stop.get() && System.nanoTime() < deadline && issued.getAndIncrement() < maxOperations) {
                    long block = firstBlock + random.nextLong(blocks);
                    if (random.nextInt(100) < readPercent) {
                        read(target, block);
                    } else {
                        write(target, block, new BlockVersion(writer, ++sequence));
                    }
                }
            }
        }

        private void write(BlockTarget target, long block, BlockVersion version) {
            byte[] bytes = version.encode(block, blockBytes);
            History.Pending p = history.invokeWrite(block, version);
            try {
                target.write(block * blockBytes, bytes);
                p.ok();
            } catch (IOException e) {
                p.failed(String.valueOf(e.getMessage()));
            }
        }

        /** Reads {@code block} and records it; false if the read failed. */
        private boolean read(BlockTarget target, long block) {
            History.Pending p = history.invokeRead(block);
            try {
                byte[] bytes = target.read(block * blockBytes, blockBytes);
                p.ok(BlockVersion.decode(bytes));
                return true;
            } catch (IOException e) {
                p.failed(String.valueOf(e.getMessage()));
                return false;
            }
        }

        /** A connector that fails yields a target whose every operation fails the same way (and retries it). */
        private BlockTarget connect() {
            try {
                return connector.connect();
            } catch (IOException e) {
                return new Unconnected(e);
            }
        }

        private void guard(Runnable body) {
            try {
                body.run();
            } catch (Throwable t) {
                crash.compareAndSet(null, t);
                stop();
            }
        }

        private void rethrow() {
            Throwable t = crash.get();
            if (t != null) {
                throw new IllegalStateException("a workload thread crashed", t);
            }
        }

        @Override
        public String toString() {
            return "versioned workload: " + writers + " writers, blocks " + firstBlock + ".."
                    + (firstBlock + blocks - 1) + " of " + blockBytes + " bytes, " + readPercent + "% reads, seed "
                    + seed + "; " + history.summary();
        }
    }

    /** Where a connector failed: every operation tries to connect again, and fails as it did. */
    private final class Unconnected implements BlockTarget {
        private IOException failure;
        private BlockTarget connected;

        Unconnected(IOException failure) {
            this.failure = failure;
        }

        private BlockTarget target() throws IOException {
            if (connected == null) {
                try {
                    connected = connector.connect();
                } catch (IOException e) {
                    failure = e;
                    throw e;
                }
            }
            return connected;
        }

        @Override
        public void write(long offset, byte[] data) throws IOException {
            target().write(offset, data);
        }

        @Override
        public byte[] read(long offset, int length) throws IOException {
            return target().read(offset, length);
        }

        @Override
        public void close() {
            if (connected != null) {
                connected.close();
            }
        }

        @Override
        public String toString() {
            return "unconnected (" + failure + ")";
        }
    }
}
