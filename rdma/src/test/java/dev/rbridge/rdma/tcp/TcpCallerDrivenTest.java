package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionServerProcess;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Caller-driven completion of the tcp provider (ConnectParams#callerDriven, {@link CallerDrivenReading}) against a
 * listener in a process of its own (it is stopped for real): who reads the replies, that an operation its issuer does
 * not wait on still completes, that waiting and non-waiting threads mixed on one connection lose nothing, and what
 * interrupting a reading caller does. The contract as a whole in this mode, against a real memserver, is memserver's
 * TcpCallerDrivenProviderContractTest.
 */
@Timeout(120)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class TcpCallerDrivenTest {
    static final String TOKEN = "driven";
    RegionServerProcess memserver;

    @BeforeAll
    void start() throws Exception {
        memserver = RegionServerProcess.start("tcp", TOKEN);
    }

    @AfterAll
    void stop() throws Exception {
        memserver.close();
    }

    RemoteConnection connect(boolean callerDriven) throws RemoteMemoryException {
        return new TcpProvider().connect(new ConnectParams().address(memserver.address).token(TOKEN)
                .clientName("driven").callerDriven(callerDriven).operationTimeout(Duration.ofSeconds(2)));
    }

    /**
     * The thread that ran the completion of an operation waited on with get; null when it was complete before this
     * thread could look (then the completion would run here, which tells nothing).
     */
    static Thread completedOn(CompletableFuture<Void> op) throws Exception {
        return completedOn(op, true);
    }

    /**
     * As {@link #completedOn(CompletableFuture)}; without {@code waitOnOperation} this thread waits only on the
     * stamp. A thread waiting on the operation itself may, once woken, run its callbacks before the completing thread
     * does (CompletableFuture lets waiters help), which blurs who completed it; in caller-driven mode that wait is
     * what lets the caller read, so there it is needed.
     */
    static Thread completedOn(CompletableFuture<Void> op, boolean waitOnOperation) throws Exception {
        AtomicReference<Thread> on = new AtomicReference<>();
        boolean[] registering = {true};
        CompletableFuture<Void> stamped = op.whenComplete((v, t) -> {
            if (!registering[0]) {
                on.set(Thread.currentThread()); // ran where the completion happened, not at registration
            }
        });
        registering[0] = false;
        if (waitOnOperation) {
            op.get(10, TimeUnit.SECONDS);
        }
        stamped.get(10, TimeUnit.SECONDS);
        return on.get();
    }

    @Test
    void aWaitingCallerReadsItsOwnReplyAndWithoutTheModeTheReaderThreadDoes() throws Exception {
        try (RemoteConnection driven = connect(true); RemoteConnection plain = connect(false);
                Arena arena = Arena.ofShared()) {
            RegionDescriptor d = driven.allocate(RegionTag.scratch("driven"), 1 << 20).get(10, TimeUnit.SECONDS);
            RegionDescriptor p = plain.allocate(RegionTag.scratch("plain"), 1 << 20).get(10, TimeUnit.SECONDS);
            MemorySegment buf = arena.allocate(4096);
            int own = 0;
            int byReaderThread = 0;
            for (int i = 0; i < 200; i++) {
                if (completedOn(driven.read(d, 0, buf)) == Thread.currentThread()) {
                    own++;
                }
                Thread on = completedOn(plain.read(p, 0, buf), false);
                if (on != null && on.getName().startsWith("rdma-tcp-reader-")) {
                    byReaderThread++;
                }
            }
            // The plain count waits on the stamp only (see completedOn); the driven count can still miss a reply
            // that came in before its caller waited, so it is not exact.
            assertTrue(byReaderThread >= 100, "without caller-driven mode the reader thread completed only "
                    + byReaderThread + " of 200");
            assertTrue(own >= 150, "the waiting caller read " + own + " of 200 replies itself");
        }
    }

    @Test
    void aCallerWaitingOnAReadSplitIntoPartsReadsEveryPartsReply() throws Exception {
        // 40 MiB goes as three requests of at most 16 MiB; the future returned combines them, and waiting on it must
        // read their replies as waiting on one would, not leave them to the reader thread. (READs only: a caller
        // issuing a large WRITE spends long enough writing it that the reader thread rightly takes the replies.)
        int size = 40 << 20;
        try (RemoteConnection c = connect(true); Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("split"), size).get(10, TimeUnit.SECONDS);
            MemorySegment src = arena.allocate(size);
            for (long i = 0; i < size; i += 8) {
                src.set(ValueLayout.JAVA_LONG_UNALIGNED, i, i * 0x9E3779B97F4A7C15L);
            }
            c.write(r, 0, src).get(10, TimeUnit.SECONDS);
            MemorySegment dst = arena.allocate(size);
            List<String> others = new ArrayList<>();
            for (int round = 0; round < 20; round++) {
                dst.fill((byte) 0);
                Thread on = completedOn(c.read(r, 0, dst));
                if (on != Thread.currentThread()) {
                    others.add(on == null ? "done before waiting" : on.getName());
                }
                assertEquals(-1L, src.mismatch(dst), "round " + round);
            }
            assertTrue(others.size() <= 5, "the waiting caller completed only " + (20 - others.size())
                    + " of 20 split reads itself; the others: " + others);
        }
    }

    @Test
    void anOperationItsIssuerDoesNotWaitOnStillCompletes() throws Exception {
        try (RemoteConnection c = connect(true); Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("unwaited"), 1 << 20).get(10, TimeUnit.SECONDS);
            MemorySegment buf = arena.allocate(4096).fill((byte) 7);
            for (int round = 0; round < 50; round++) {
                c.write(r, 0, buf).get(10, TimeUnit.SECONDS); // this thread becomes the trusted waiter
                CountDownLatch done = new CountDownLatch(1);
                c.read(r, 0, arena.allocate(4096)).whenComplete((v, t) -> done.countDown()); // and then does not wait
                assertTrue(done.await(10, TimeUnit.SECONDS), "round " + round + ": an operation nobody waits on "
                        + "was never completed");
            }
        }
    }

    @Test
    void waitingAndNonWaitingThreadsOnOneConnectionLoseNothing() throws Exception {
        int threads = 6;
        int slot = 64 << 10;
        try (RemoteConnection c = connect(true); Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("mixed"), (long) threads * slot)
                    .get(10, TimeUnit.SECONDS);
            List<CompletableFuture<Void>> workers = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                int id = t;
                workers.add(CompletableFuture.runAsync(() -> {
                    try {
                        // Even threads wait on every operation (they read replies); odd ones keep eight in flight
                        // and wait only on their completions (the reader thread or a waiting neighbour serves them).
                        Random random = new Random(id);
                        long base = (long) id * slot;
                        byte[] model = new byte[slot];
                        List<CompletableFuture<Void>> unwaited = new ArrayList<>();
                        for (int i = 0; i < 300; i++) {
                            int len = 1 + random.nextInt(8192);
                            int off = random.nextInt(slot - len);
                            byte[] data = new byte[len];
                            random.nextBytes(data);
                            System.arraycopy(data, 0, model, off, len);
                            MemorySegment src = arena.allocate(len);
                            src.copyFrom(MemorySegment.ofArray(data));
                            CompletableFuture<Void> w = c.write(r, base + off, src);
                            if (id % 2 == 0 || i % 8 == 7) {
                                w.get(10, TimeUnit.SECONDS);
                            } else {
                                unwaited.add(w); // completed by others; overlapping writes stay in issue order
                            }
                        }
                        c.flush().get(10, TimeUnit.SECONDS);
                        for (CompletableFuture<Void> w : unwaited) {
                            assertTrue(w.isDone(), "a FLUSH completed before a write issued ahead of it");
                            w.getNow(null); // and none failed
                        }
                        MemorySegment back = arena.allocate(slot);
                        c.read(r, base, back).get(10, TimeUnit.SECONDS);
                        assertArrayEquals(model, back.toArray(ValueLayout.JAVA_BYTE), "thread " + id);
                    } catch (Exception e) {
                        throw new AssertionError(e);
                    }
                }, runnable -> Thread.ofPlatform().start(runnable)));
            }
            CompletableFuture.allOf(workers.toArray(CompletableFuture[]::new)).get(60, TimeUnit.SECONDS);
            assertTrue(c.isOpen());
        }
    }

    @Test
    void interruptingACallerThatReadsClosesTheConnectionSayingWhy() throws Exception {
        try (RemoteConnection c = connect(true); RemoteConnection other = connect(true);
                Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("interrupted"), 1 << 20).get(10, TimeUnit.SECONDS);
            RegionDescriptor o = other.allocate(RegionTag.scratch("bystander"), 1 << 20).get(10, TimeUnit.SECONDS);
            AtomicReference<CompletableFuture<Void>> op = new AtomicReference<>();
            // Whether the frozen read is read by this caller or by the reader thread is up to the scheduler (the
            // reader thread may hold the role, blocked, when the caller comes to wait): look at where the caller is,
            // and when it only waits, thaw the memserver and try again.
            for (int attempt = 1;; attempt++) {
                AtomicReference<Throwable> waited = new AtomicReference<>();
                AtomicReference<Boolean> stillInterrupted = new AtomicReference<>();
                CountDownLatch issued = new CountDownLatch(1);
                Thread caller = Thread.ofPlatform().start(() -> {
                    try {
                        // Until this thread has read a reply itself, it is not trusted to wait, and issuing wakes
                        // the reader thread. Bounded by time, not by a count: under load it can take many rounds.
                        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(8);
                        while (completedOn(c.read(r, 0, arena.allocate(4096))) != Thread.currentThread()) {
                            if (System.nanoTime() > until) {
                                throw new AssertionError("in 8 s of reads this caller never read a reply itself");
                            }
                            Thread.onSpinWait();
                        }
                        memserver.signal("STOP");
                        op.set(c.read(r, 0, arena.allocate(4096)));
                        issued.countDown();
                        op.get().get(10, TimeUnit.SECONDS); // reads, and blocks: the memserver is frozen
                    } catch (Throwable t) {
                        stillInterrupted.set(Thread.currentThread().isInterrupted());
                        waited.set(t);
                        issued.countDown();
                    }
                });
                boolean reading;
                try {
                    assertTrue(issued.await(20, TimeUnit.SECONDS));
                    if (waited.get() instanceof AssertionError precondition) {
                        throw precondition;
                    }
                    Thread.sleep(300); // well past the polling budget, well within the 2 s operation timeout
                    reading = java.util.Arrays.stream(caller.getStackTrace()).anyMatch(
                            f -> f.getMethodName().equals("awaitHeader") && f.getClassName().endsWith("ReplyReader"));
                    if (reading) {
                        caller.interrupt();
                    }
                } finally {
                    memserver.signal("CONT");
                }
                caller.join(10_000);
                assertFalse(caller.isAlive(), "the caller still waits 10 s after the memserver thawed");
                if (!reading) {
                    assertNull(waited.get(), "the thawed read completes for a caller that only waited");
                    assertTrue(attempt < 5, "in 5 attempts the caller never read its frozen operation itself");
                    continue;
                }
                // The read failed under it, so the wait ends with that failure; the interrupt stays set.
                ExecutionException failed = assertInstanceOf(ExecutionException.class, waited.get());
                assertTrue(failed.getCause().getMessage().contains("interrupted"), failed.getCause().getMessage());
                assertTrue(stillInterrupted.get());
                break;
            }
            ExecutionException e = assertThrows(ExecutionException.class, () -> op.get().get(10, TimeUnit.SECONDS));
            RemoteMemoryException cause = assertInstanceOf(RemoteMemoryException.class, e.getCause());
            assertEquals(Status.CONNECTION_LOST, cause.status());
            assertTrue(cause.getMessage().contains("interrupted"), cause.getMessage());
            assertFalse(c.isOpen());
            // Everyone else carries on.
            MemorySegment buf = arena.allocate(4096).fill((byte) 3);
            other.write(o, 0, buf).get(10, TimeUnit.SECONDS);
            MemorySegment back = arena.allocate(4096);
            other.read(o, 0, back).get(10, TimeUnit.SECONDS);
            assertEquals(3, back.get(ValueLayout.JAVA_BYTE, 4095));
            assertSame(Status.CONNECTION_LOST, ((RemoteMemoryException) assertThrows(ExecutionException.class,
                    () -> c.read(r, 0, buf).get(10, TimeUnit.SECONDS)).getCause()).status());
        }
    }
}
