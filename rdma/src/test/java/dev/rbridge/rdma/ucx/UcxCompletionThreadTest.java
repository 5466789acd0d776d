package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * No caller's callback runs on the UCX progress thread: a read, a write, a flush and the mapping of a region (its
 * remote key unpacked there) complete elsewhere. Each operation is issued while the progress thread is held, so the
 * callback is attached before the completion can happen and runs wherever the completion does.
 */
@Timeout(120)
class UcxCompletionThreadTest {
    @Test
    void callbacksNeverRunOnTheProgressThread() throws Exception {
        try (UcxLoopback loopback = new UcxLoopback("threads"); UcxConnection c = loopback.connect("threads");
                Arena arena = Arena.ofShared()) {
            Thread progress = c.loop().thread();
            Map<String, Thread> ranOn = new ConcurrentHashMap<>();
            RegionDescriptor r = held(c, "allocate", ranOn,
                    () -> c.allocate(RegionTag.scratch("threads"), 1 << 20));
            MemorySegment page = arena.allocate(4096);
            held(c, "write", ranOn, () -> c.write(r, 0, page));
            held(c, "read", ranOn, () -> c.read(r, 4096, page));
            held(c, "flush", ranOn, c::flush);
            held(c, "read into the heap", ranOn, () -> c.read(r, 0, MemorySegment.ofArray(new byte[4096])));
            assertEquals(5, ranOn.size(), ranOn.toString());
            ranOn.forEach((what, thread) -> assertNotEquals(progress, thread, what + " called back on "
                    + thread.getName()));
        }
    }

    /** Holds the progress thread, issues the operation, attaches a callback, lets go; the operation's result. */
    private static <T> T held(UcxConnection c, String what, Map<String, Thread> ranOn,
            Supplier<CompletableFuture<T>> op) throws Exception {
        CountDownLatch holding = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        c.loop().execute(() -> {
            holding.countDown();
            try {
                release.await(60, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        assertTrue(holding.await(30, TimeUnit.SECONDS));
        CompletableFuture<T> f;
        CompletableFuture<T> seen;
        try {
            f = op.get();
            assertFalse(f.isDone(), what + " completed while the progress thread was held");
            seen = f.whenComplete((v, e) -> ranOn.put(what, Thread.currentThread()));
        } finally {
            release.countDown();
        }
        return seen.get(30, TimeUnit.SECONDS);
    }
}
