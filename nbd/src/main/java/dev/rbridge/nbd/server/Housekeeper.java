package dev.rbridge.nbd.server;

import dev.rbridge.common.Durations;
import dev.rbridge.common.RateLimitedLog;
import dev.rbridge.common.duty.Duty;
import dev.rbridge.common.duty.DutyCycle;

import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * The server's one thread that keeps time, so that no connection has to: it closes a connection whose handshake does
 * not finish within {@code handshakeTimeout}, whose request does not arrive whole within {@code requestTimeout}, or
 * whose replies go unread for {@code replyTimeout}; and while requests wait for payload memory, the connection holding
 * the most of it stalled by its client for {@code stalledGrace}. Idle connections are never timed out. It also hands
 * the {@link BufferPool}'s idle blocks back, once a second.
 *
 * <p>It runs as a {@link DutyCycle}: a failed sweep is logged and the next comes after a tick; should an
 * {@link Error} end it while the server runs, the server's failures say so, and readiness with them.
 */
final class Housekeeper implements Duty {
    /** How often every connection's clocks are looked at. */
    private static final long HOUSEKEEPING_MILLIS = 100;
    private static final long TRIM_NANOS = 1_000_000_000L;

    private final NbdServer server;
    private final NbdServerConfig config;
    private final ConnectionSlots slots;
    private final RateLimitedLog limitedLog;
    private DutyCycle cycle;
    /** When the buffer pool was last trimmed (System.nanoTime); the duty thread's own. */
    private long trimmed = System.nanoTime();

    Housekeeper(NbdServer server, ConnectionSlots slots, RateLimitedLog limitedLog) {
        this.server = server;
        this.config = server.config();
        this.slots = slots;
        this.limitedLog = limitedLog;
    }

    void start() {
        cycle = DutyCycle.start(this, Duration.ofMillis(HOUSEKEEPING_MILLIS));
    }

    /** Ends the cycles (the server is closing), waiting briefly for the one under way. */
    void stop() {
        if (cycle != null) {
            cycle.close(Duration.ofSeconds(1));
        }
    }

    @Override
    public String role() {
        return "nbd-housekeeper";
    }

    /** Closes connections that overstay a time limit, and stalled ones whose memory others wait for. */
    @Override
    public long doWork() {
        if (server.closing()) {
            return UNTIL_WOKEN;
        }
        long now = System.nanoTime();
        sweep(now);
        if (now - trimmed >= TRIM_NANOS) { // trimming walks the idle buffers: not every tick
            trimmed = now;
            server.bufferPool().trim();
        }
        return TimeUnit.MILLISECONDS.toNanos(HOUSEKEEPING_MILLIS);
    }

    @Override
    public void onStopped(Error error) {
        if (!server.closing()) {
            server.failed("housekeeper", "it stopped (" + error + "), so time limits are no longer enforced");
        }
    }

    private void sweep(long now) {
        PayloadBudget.Pressure pressure = server.payloadBudget().pressure();
        Connection mostHeldStalled = null;
        long mostHeld = 0;
        long grace = config.stalledGrace().toNanos();
        for (Connection c : slots.connections()) {
            if (c.closing()) {
                continue;
            }
            if (!c.inTransmission()) {
                if (now - c.acceptedNanos() > config.handshakeTimeout().toNanos()) {
                    timeOut(c, "handshake_timeout", "handshake not finished within "
                            + Durations.human(config.handshakeTimeout()));
                }
                continue;
            }
            long partial = c.partialSinceNanos();
            long stalledReplies = c.repliesStalledSinceNanos();
            if (partial != 0 && now - partial > config.requestTimeout().toNanos()) {
                timeOut(c, "request_timeout", "a request did not arrive whole within "
                        + Durations.human(config.requestTimeout()));
                continue;
            }
            if (stalledReplies != 0 && now - stalledReplies > config.replyTimeout().toNanos()) {
                timeOut(c, "reply_timeout", "replies went unread for " + Durations.human(config.replyTimeout()));
                continue;
            }
            boolean stalled = (partial != 0 && now - Math.max(partial, c.lastReadNanos()) > grace)
                    || (stalledReplies != 0 && now - stalledReplies > grace);
            long held = stalled && pressure.wouldHelp(c.peerAddress()) ? c.heldBytes() : 0;
            if (held > mostHeld) {
                mostHeld = held;
                mostHeldStalled = c;
            }
        }
        if (mostHeldStalled != null) {
            timeOut(mostHeldStalled, "stalled_evicted", "stalled holding " + mostHeld
                    + " bytes of payload memory that other requests wait for");
        }
    }

    private void timeOut(Connection c, String reason, String why) {
        if (c.decideToClose(why)) {
            config.metrics().connectionClosed(reason);
            limitedLog.warn(reason, "connection {} from {}: {}; closing it", c.id(), c.peer(), why);
            c.closeChannel();
        }
    }
}
