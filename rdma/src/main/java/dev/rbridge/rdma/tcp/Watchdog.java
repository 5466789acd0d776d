package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.wire.ControlClient;

import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;

/**
 * The watchdog of a tcp client connection, on the provider's shared timer: declares the memserver dead when any request
 * is older than the operation timeout, or the reply being read is (a memserver SIGSTOPped or partitioned, or stopped
 * halfway through a READ reply). The timeout runs from issue, so it bounds each operation's latency, queueing
 * included. What the connection does then (close, and fail everything on a thread of its own) is the connection's.
 */
final class Watchdog {
    private final ControlClient control;
    private final ReplyReader reader;
    private final long timeoutNanos;
    private final String peer;
    private final BooleanSupplier open;
    private final Consumer<RemoteMemoryException> declareDead;
    private final ScheduledFuture<?> task;

    Watchdog(ControlClient control, ReplyReader reader, long timeoutNanos, String peer, BooleanSupplier open,
            Consumer<RemoteMemoryException> declareDead) {
        this.control = control;
        this.reader = reader;
        this.timeoutNanos = timeoutNanos;
        this.peer = peer;
        this.open = open;
        this.declareDead = declareDead;
        long period = Math.max(10, Math.min(100, TimeUnit.NANOSECONDS.toMillis(timeoutNanos) / 4));
        this.task = TcpProvider.TIMER.scheduleWithFixedDelay(this::check, period, period, TimeUnit.MILLISECONDS);
    }

    private void check() {
        if (!open.getAsBoolean()) {
            return;
        }
        long now = System.nanoTime();
        TcpCall reading = reader.current();
        if (reading != null && now - reading.deadline() > 0) {
            declareDead.accept(new RemoteMemoryException(Status.TIMEOUT, "memserver " + peer + " did not finish its "
                    + reading.what() + " reply within " + TimeUnit.NANOSECONDS.toMillis(timeoutNanos)
                    + " ms (it stopped in the middle); connection declared dead"));
            return;
        }
        ControlClient.Call late = control.overdue(now);
        if (late != null) {
            declareDead.accept(control.timeout(late, timeoutNanos));
        }
    }

    void cancel() {
        task.cancel(false);
    }
}
