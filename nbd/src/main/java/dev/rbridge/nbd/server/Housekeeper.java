package dev.rbridge.nbd.server;

import dev.rbridge.common.Durations;
import dev.rbridge.common.RateLimitedLog;

/**
 * The server's one thread that keeps time, so that no connection has to: it closes a connection whose handshake does
 * not finish within {@code handshakeTimeout}, whose request does not arrive whole within {@code requestTimeout}, or
 * whose replies go unread for {@code replyTimeout}; and while requests wait for payload memory, the connection holding
 * the most of it stalled by its client for {@code stalledGrace}. Idle connections are never timed out. It also hands
 * the {@link BufferPool}'s idle blocks back, once a second.
 *
 * <p>Should it stop while the server runs, the server's failures say so, and readiness with them.
 */
final class Housekeeper {
    /** How often every connection's clocks are looked at. */
    private static final long HOUSEKEEPING_MILLIS = 100;
    private static final long TRIM_NANOS = 1_000_000_000L;

    private final NbdServer server;
    private final NbdServerConfig config;
    private final ConnectionSlots slots;
    private final RateLimitedLog limitedLog;
    private final Thread thread;

    Housekeeper(NbdServer server, ConnectionSlots slots, RateLimitedLog limitedLog) {
        this.server = server;
        this.config = server.config();
        this.slots = slots;
        this.limitedLog = limitedLog;
        this.thread = new Thread(this::run, "nbd-housekeeper");
        thread.setDaemon(true);
    }

    void start() {
        thread.start();
    }

    /** Ends the thread (the server is closing, so its loop ends at the next tick at the latest). */
    void stop() {
        thread.interrupt();
    }

    /** Closes connections that overstay a time limit, and stalled ones whose memory others wait for. */
    private void run() {
        try {
            long trimmed = System.nanoTime();
            while (!server.closing()) {
                try {
                    long now = System.nanoTime();
                    sweep(now);
                    if (now - trimmed >= TRIM_NANOS) { // trimming walks the idle buffers: not every tick
                        trimmed = now;
                        server.bufferPool().trim();
                    }
                } catch (RuntimeException | Error e) {
                    limitedLog.warn("housekeeping", "housekeeping failed; trying again", e);
                }
                NbdServer.sleep(HOUSEKEEPING_MILLIS);
            }
        } finally {
            if (!server.closing()) {
                server.failed("housekeeper", "it stopped, so time limits are no longer enforced");
            }
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
