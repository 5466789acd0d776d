package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.wire.ControlClient;
import dev.rbridge.rdma.wire.MalformedMessageException;

import java.io.IOException;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * Caller-driven completion ({@link ConnectParams#callerDriven}): reading replies is a role instead of a thread.
 * Whoever holds {@link #readRole} reads and completes replies with the connection's {@link ReplyReader}. A thread
 * waiting on one of its futures ({@link DrivenFuture}) takes the role when it is free, or when the reader thread,
 * polling between replies, sees it asked for ({@link #waiters}) and steps aside; it gives the role back once its own
 * reply is in. The reader thread reads only while requests are pending and nobody else reads, so a synchronous caller
 * goes request, poll, reply on its own thread, like a blocking socket client.
 *
 * <p>A thread that has just read its own reply is trusted to wait on its next operation, so issuing one wakes nobody;
 * the reader thread, asleep while nothing is pending, looks for an operation nobody waits on every {@link
 * #SAFETY_NANOS} while such trust stands, completes it, and the trust ends until that thread waits again.
 */
final class CallerDrivenReading {
    /**
     * How often the reader thread looks for an operation that its issuer, trusted to wait on it, did not wait on:
     * about the most such an operation is late (plus any reply being read when the look comes); the issuer is not
     * trusted again until it waits.
     */
    static final long SAFETY_NANOS = 10_000_000;
    /** Empty timed looks after which the reader thread stops looking (the caller went quiet) and sleeps until woken. */
    private static final int IDLE_LOOKS = 16;
    /** How many connections the calling thread is reading for as a caller. */
    private static final ThreadLocal<int[]> DRIVING = ThreadLocal.withInitial(() -> new int[1]);

    private final ReplyReader reader;
    private final ControlClient control;
    private final long timeoutNanos;
    private final BooleanSupplier open;
    /** Reading failed: the connection closes. */
    private final Consumer<Exception> failed;
    /** The connection's reader thread, set once before it starts. */
    private final Supplier<Thread> readerThread;
    /** The right to read replies: held by the reader thread or by one waiting caller. */
    private final ReentrantLock readRole = new ReentrantLock();
    /** Callers asking for {@link #readRole}: the reader thread steps aside at its next wait for input. */
    private final AtomicInteger waiters = new AtomicInteger();
    /** For the reader thread's polls: a caller wants the read role. */
    private final BooleanSupplier askedFor = () -> waiters.get() > 0;
    /**
     * The thread that last waited on an operation. Trusted to wait on its next one too, so issuing one wakes nobody;
     * the reader thread then looks for operations nobody waits on every {@link #SAFETY_NANOS} instead.
     */
    private volatile Thread lastDriver;
    /** The reader thread woke from a timed look rather than being woken. Reader thread only. */
    private boolean safetyWake;
    /** Timed looks in a row that found nothing pending. Reader thread only. */
    private int idleWakes;

    CallerDrivenReading(ReplyReader reader, ControlClient control, long timeoutNanos, BooleanSupplier open,
            Consumer<Exception> failed, Supplier<Thread> readerThread) {
        this.reader = reader;
        this.control = control;
        this.timeoutNanos = timeoutNanos;
        this.open = open;
        this.failed = failed;
        this.readerThread = readerThread;
    }

    /** A future for a request of this connection: waited on, it lets the waiting thread read the replies. */
    <T> DrivenFuture<T> future() {
        return new DrivenFuture<>();
    }

    /** The calling thread holds the read role now. */
    boolean heldByCurrentThread() {
        return readRole.isHeldByCurrentThread();
    }

    /** Whether the calling thread reads replies of any tcp connection as a caller now. */
    static boolean driving() {
        return DRIVING.get()[0] > 0;
    }

    /**
     * A request was issued: somebody must read its reply. The reader thread, unless a waiting caller takes the role
     * first. A holder that lets go re-checks pending after unlocking, so skipping the wake while it holds is safe; so is
     * skipping it for the last driver, whom the reader thread's timed look backs up.
     */
    void issued() {
        if (!readRole.isLocked() && lastDriver != Thread.currentThread()) {
            LockSupport.unpark(readerThread.get());
        }
    }

    /** The reader thread: reads while requests are pending and no waiting caller wants to. */
    void readerLoop() {
        while (open.getAsBoolean()) {
            if (control.idle() || waiters.get() > 0 || !readRole.tryLock()) {
                parkIdle();
                continue;
            }
            if (safetyWake) {
                lastDriver = null; // it issued an operation and did not wait on it: wake for its next ones
            }
            idleWakes = 0;
            try {
                while (!control.idle() && reader.awaitHeader(askedFor)) {
                    reader.readOne();
                }
            } catch (MalformedMessageException | IOException | RuntimeException e) {
                failed.accept(e);
            } finally {
                readRole.unlock();
            }
        }
    }

    /** The reader thread with nothing to do: sleeps until woken, or looks again shortly. */
    private void parkIdle() {
        if (lastDriver == null) {
            safetyWake = false;
            LockSupport.park(this); // an issue, a caller giving the role back, or close wakes it
            return;
        }
        long start = System.nanoTime();
        LockSupport.parkNanos(this, SAFETY_NANOS);
        safetyWake = System.nanoTime() - start >= SAFETY_NANOS;
        if (!safetyWake) {
            return;
        }
        if (!control.idle()) {
            idleWakes = 0;
        } else if (++idleWakes >= IDLE_LOOKS) {
            lastDriver = null;
            idleWakes = 0;
        }
    }

    /**
     * A caller waiting on {@code f} reads replies itself until {@code f} completes, if it can take the read role
     * within the polling budget; otherwise it returns and the caller waits as usual.
     */
    private void drive(CompletableFuture<?> f) {
        if (readRole.isHeldByCurrentThread() || Thread.currentThread() == readerThread.get()
                || Thread.currentThread().isInterrupted()) {
            return; // an interrupted thread must not touch the socket: its read would close it
        }
        if (lastDriver != Thread.currentThread()) {
            // It waits on what it issues (even when the reply was in before it came to wait, or another reader
            // completes it): trusted from now on. The reader thread moves from its untimed sleep to timed looks.
            lastDriver = Thread.currentThread();
            LockSupport.unpark(readerThread.get());
        }
        if (f.isDone() || !takeReadRole(f)) {
            return;
        }
        int[] driving = DRIVING.get();
        driving[0]++;
        try {
            while (!f.isDone() && reader.awaitHeader(null)) {
                reader.readOne();
            }
        } catch (MalformedMessageException | IOException | RuntimeException e) {
            failed.accept(e);
        } finally {
            driving[0]--;
            readRole.unlock();
            if (!control.idle()) {
                LockSupport.unpark(readerThread.get()); // other callers' replies: the reader thread takes over
            }
        }
    }

    private boolean takeReadRole(CompletableFuture<?> f) {
        waiters.incrementAndGet();
        boolean taken = false;
        try {
            long start = System.nanoTime();
            while (!f.isDone() && open.getAsBoolean()) {
                if (readRole.tryLock()) {
                    taken = true;
                    return true;
                }
                if (reader.blocked() || System.nanoTime() - start > Spinner.BUDGET_NANOS) {
                    return false; // the holder cannot step aside now: it completes f
                }
                Thread.yield();
            }
            return false;
        } finally {
            waiters.decrementAndGet();
            if (!taken && !control.idle() && !readRole.isLocked()) {
                LockSupport.unpark(readerThread.get()); // it may have stepped aside for us and parked
            }
        }
    }

    /**
     * Reads replies until {@code f} (this connection's operations only) completes, for a caller about to wait up to
     * {@code waitNanos} on it; a shorter wait than the operation timeout could not be kept while blocked in a read.
     */
    private void driveFor(CompletableFuture<?> f, long waitNanos) {
        if (waitNanos >= timeoutNanos) {
            drive(f); // the watchdog bounds this one
        }
    }

    /** A request's future that, waited on, lets the waiting thread read the replies. */
    final class DrivenFuture<T> extends CompletableFuture<T> {
        CallerDrivenReading reading() {
            return CallerDrivenReading.this;
        }

        @Override
        public T get() throws InterruptedException, ExecutionException {
            drive(this);
            return super.get();
        }

        @Override
        public T get(long timeout, TimeUnit unit) throws InterruptedException, ExecutionException, TimeoutException {
            driveFor(this, unit.toNanos(timeout));
            return super.get(timeout, unit);
        }

        @Override
        public T join() {
            drive(this);
            return super.join();
        }
    }

    /**
     * {@link CompletableFuture#allOf}, except that a thread waiting on the result reads the parts' replies, as it would
     * waiting on one part; otherwise nobody it trusts to wait would read them, and they would wait for the reader
     * thread's next timed look.
     */
    static CompletableFuture<Void> allOf(CompletableFuture<?>[] parts) {
        CompletableFuture<Void> all = CompletableFuture.allOf(parts);
        for (CompletableFuture<?> part : parts) {
            if (part instanceof CallerDrivenReading.DrivenFuture<?>) {
                AllOf joined = new AllOf(parts);
                all.whenComplete((v, t) -> {
                    if (t == null) {
                        joined.complete(null);
                    } else {
                        joined.completeExceptionally(t);
                    }
                });
                return joined;
            }
        }
        return all;
    }

    /** See {@link #allOf}. */
    private static final class AllOf extends CompletableFuture<Void> {
        private final CompletableFuture<?>[] parts;

        AllOf(CompletableFuture<?>[] parts) {
            this.parts = parts;
        }

        /**
         * Reads each connection's replies until all its parts are done, holding the read role throughout: driving the
         * parts one by one would hand the role to the reader thread between them (a caller that lets go of it with
         * operations pending wakes that thread), which then completes the rest.
         */
        private void driveParts(long waitNanos) {
            Map<CallerDrivenReading, List<CompletableFuture<?>>> byConnection = new IdentityHashMap<>();
            for (CompletableFuture<?> part : parts) {
                if (part instanceof CallerDrivenReading.DrivenFuture<?> d) {
                    byConnection.computeIfAbsent(d.reading(), k -> new ArrayList<>()).add(d);
                }
            }
            byConnection.forEach((reading, own) -> reading.driveFor(own.size() == 1 ? own.getFirst()
                    : CompletableFuture.allOf(own.toArray(CompletableFuture[]::new)), waitNanos));
        }

        @Override
        public Void get() throws InterruptedException, ExecutionException {
            driveParts(Long.MAX_VALUE);
            return super.get();
        }

        @Override
        public Void get(long timeout, TimeUnit unit) throws InterruptedException, ExecutionException, TimeoutException {
            driveParts(unit.toNanos(timeout));
            return super.get(timeout, unit);
        }

        @Override
        public Void join() {
            driveParts(Long.MAX_VALUE);
            return super.join();
        }
    }
}
