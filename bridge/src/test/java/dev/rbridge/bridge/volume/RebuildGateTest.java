package dev.rbridge.bridge.volume;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The gate between a rebuild's copy of a chunk and the writes to it: the copier never copies a chunk while a write to
 * it is in flight, and a write never starts on a chunk being copied.
 */
@Timeout(60)
class RebuildGateTest {
    private static final int CHUNK = 4096;
    private static final long LONG = TimeUnit.SECONDS.toNanos(10);

    @Test
    void aSlabIsCutIntoChunksTheLastOnePartial() {
        assertEquals(11, new RebuildGate(10L * CHUNK + 1, CHUNK).chunks());
        assertEquals(10, new RebuildGate(10L * CHUNK, CHUNK).chunks());
    }

    @Test
    void theCopyOfAChunkWaitsForTheWritesInItToLeave() throws Exception {
        RebuildGate gate = new RebuildGate(8L * CHUNK, CHUNK);
        assertNull(gate.enter(CHUNK, 2L * CHUNK), "an open gate lets the write through"); // chunks 1 and 2
        CompletableFuture<Void> copier = CompletableFuture.runAsync(() -> {
            try {
                gate.close(2, LONG);
            } catch (TimeoutException e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(200);
        assertFalse(copier.isDone(), "the copier closed chunk 2 while a write to it was in flight");
        gate.leave(CHUNK, 2L * CHUNK);
        copier.get(10, TimeUnit.SECONDS);
        gate.open();
        gate.close(1, TimeUnit.MILLISECONDS.toNanos(100)); // the write left chunk 1 too
        gate.open();
    }

    @Test
    void aWriteMeetingTheChunkBeingCopiedWaitsForItAndLeavesNoCountBehind() throws Exception {
        RebuildGate gate = new RebuildGate(8L * CHUNK, CHUNK);
        gate.close(3, LONG); // nothing in flight: returns at once
        CompletableFuture<Void> spanning = gate.enter(2L * CHUNK, 3L * CHUNK); // chunks 2, 3 and 4
        assertNotNull(spanning, "a write over the chunk being copied must wait");
        assertFalse(spanning.isDone());
        assertNull(gate.enter(3L * CHUNK - 1, 1), "the last byte before the chunk being copied");
        gate.leave(3L * CHUNK - 1, 1);
        assertNull(gate.enter(4L * CHUNK, 1), "the first byte after it");
        gate.leave(4L * CHUNK, 1);
        CompletableFuture<Void> inside = gate.enter(3L * CHUNK + 100, 1);
        assertNotNull(inside, "one byte inside it");

        gate.open();
        assertTrue(spanning.isDone() && inside.isDone(), "opening the gate lets the waiting writes go on");
        for (int c = 0; c < gate.chunks(); c++) {
            gate.close(c, TimeUnit.MILLISECONDS.toNanos(100)); // a write that waited took its counts back
            gate.open();
        }
    }

    @Test
    void aCopyThatWaitsTooLongGivesUpAndOpensTheGateForTheWritesWaitingOnIt() throws Exception {
        RebuildGate gate = new RebuildGate(4L * CHUNK, CHUNK);
        assertNull(gate.enter(0, 100)); // a write that never completes
        AtomicReference<CompletableFuture<Void>> waiting = new AtomicReference<>();
        CompletableFuture<Void> copier = CompletableFuture.runAsync(() -> {
            try {
                gate.close(0, TimeUnit.MILLISECONDS.toNanos(500));
            } catch (TimeoutException e) {
                throw new IllegalStateException(e);
            }
        });
        long deadline = System.nanoTime() + LONG;
        while (waiting.get() == null) {
            assertTrue(System.nanoTime() < deadline, "the gate never closed");
            CompletableFuture<Void> w = gate.enter(10, 10);
            if (w == null) {
                gate.leave(10, 10); // not closed yet
                Thread.sleep(1);
            } else {
                waiting.set(w);
            }
        }
        Exception e = assertThrows(Exception.class, () -> copier.get(10, TimeUnit.SECONDS));
        assertTrue(e.getCause() instanceof IllegalStateException ise && ise.getCause() instanceof TimeoutException,
                "the copy gives up: " + e);
        waiting.get().get(10, TimeUnit.SECONDS);
        assertNull(gate.enter(10, 10), "the gate is open again");
    }

    @Test
    void aWindowOfChunksClosesAtItsEndAndOpensBehindTheOldest() throws Exception {
        RebuildGate gate = new RebuildGate(8L * CHUNK, CHUNK);
        gate.close(2, LONG);
        gate.close(3, LONG);
        gate.close(4, LONG);
        assertThrows(IllegalStateException.class, () -> gate.close(6, LONG), "a gap in the window");
        assertNull(gate.enter(CHUNK, CHUNK), "the chunk before the window");
        gate.leave(CHUNK, CHUNK);
        assertNull(gate.enter(5L * CHUNK, CHUNK), "the chunk after it");
        gate.leave(5L * CHUNK, CHUNK);
        CompletableFuture<Void> onTwo = gate.enter(2L * CHUNK, 1);
        CompletableFuture<Void> onFour = gate.enter(4L * CHUNK + 7, 1);
        assertNotNull(onTwo, "a chunk at the window's start");
        assertNotNull(onFour, "a chunk at its end");

        gate.openThrough(2);
        assertTrue(onTwo.isDone() && onFour.isDone(), "a moving window wakes its waiters to look again");
        assertNull(gate.enter(2L * CHUNK, 1), "the oldest chunk landed: writes may enter it");
        gate.leave(2L * CHUNK, 1);
        CompletableFuture<Void> again = gate.enter(4L * CHUNK + 7, 1);
        assertNotNull(again, "chunk 4 is still being copied");
        assertFalse(again.isDone());
        gate.close(5, LONG); // the window goes on from its end

        gate.openThrough(5);
        assertTrue(again.isDone());
        for (int c = 0; c < gate.chunks(); c++) {
            assertNull(gate.enter((long) c * CHUNK, CHUNK), "every chunk is open once the window passed: " + c);
            gate.leave((long) c * CHUNK, CHUNK);
        }
        gate.close(0, LONG); // an open gate takes a new window anywhere
        gate.open();
    }

    /** Many writers and one copier: while the copier holds a window of chunks, no write is inside them. */
    @Test
    void noWriteIsEverInsideTheChunkBeingCopied() throws Exception {
        int chunks = 16;
        RebuildGate gate = new RebuildGate((long) chunks * CHUNK, CHUNK);
        AtomicIntegerArray inside = new AtomicIntegerArray(chunks);
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> writers = new ArrayList<>();
        for (int t = 0; t < 3; t++) {
            writers.add(Thread.ofPlatform().start(() -> {
                ThreadLocalRandom rnd = ThreadLocalRandom.current();
                try {
                    while (!stop.get()) {
                        long offset = rnd.nextLong((long) chunks * CHUNK - 1);
                        long length = 1 + rnd.nextLong(Math.min(3L * CHUNK, (long) chunks * CHUNK - offset));
                        CompletableFuture<Void> wait;
                        while ((wait = gate.enter(offset, length)) != null) {
                            wait.get(10, TimeUnit.SECONDS);
                        }
                        int first = (int) (offset / CHUNK);
                        int last = (int) ((offset + length - 1) / CHUNK);
                        for (int c = first; c <= last; c++) {
                            inside.incrementAndGet(c);
                        }
                        Thread.onSpinWait();
                        for (int c = first; c <= last; c++) {
                            inside.decrementAndGet(c);
                        }
                        gate.leave(offset, length);
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            }));
        }
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
        int copies = 0;
        try {
            while (System.nanoTime() < until) {
                // A window of three chunks, as the rebuild keeps: closed at its end, opened behind its oldest.
                try {
                    for (int c = 0; c < chunks; c++) {
                        gate.close(c, LONG);
                        for (int i = 0; i < 50; i++) {
                            for (int w = Math.max(0, c - 2); w <= c; w++) {
                                assertEquals(0, inside.get(w), "a write is inside chunk " + w + " while it is copied");
                            }
                            Thread.onSpinWait();
                        }
                        if (c >= 2) {
                            gate.openThrough(c - 2);
                        }
                        copies++;
                    }
                } finally {
                    gate.open();
                }
            }
        } finally {
            stop.set(true);
            for (Thread w : writers) {
                assertTrue(w.join(Duration.ofSeconds(10)), "a writer did not stop");
            }
        }
        assertNull(failure.get(), () -> "a writer failed: " + failure.get());
        assertTrue(copies > chunks, "the copier went round: " + copies);
    }
}
