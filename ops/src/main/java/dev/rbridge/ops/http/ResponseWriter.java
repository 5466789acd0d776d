package dev.rbridge.ops.http;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.concurrent.TimeUnit;

/**
 * Writes one connection's answer without blocking, within the write timeout, and notes when the peer last took
 * some of it: an answer is stalled, so its connection evictable, only when the peer has taken none of it for
 * {@link OpsHttpConfig#writeStall()}. Once the answer is out, starts its after-sent action. Selector thread only.
 */
final class ResponseWriter {
    private static final int WRITE_SLICE = 256 << 10;

    private final SocketChannel ch;
    private final OpsHttpConfig config;
    private ByteBuffer out;
    private boolean closeAfter;
    private long startedAt;
    /** When the peer last took some of the answer being written (or the writing began). */
    private long progressAt;
    private Runnable afterSent;

    ResponseWriter(SocketChannel ch, OpsHttpConfig config) {
        this.ch = ch;
        this.config = config;
    }

    /** Takes {@code bytes} to write from {@code now}; {@code close}: the connection closes once they are out. */
    void begin(ByteBuffer bytes, boolean close, long now) {
        out = bytes;
        closeAfter = close;
        startedAt = now;
        progressAt = now;
    }

    /** Writes what the socket takes now; true when the whole answer is out. */
    boolean write() throws IOException {
        // in slices: the JDK copies a heap buffer through a temporary direct one as large as what is written
        int limit = out.limit();
        out.limit(Math.min(limit, out.position() + WRITE_SLICE));
        try {
            if (ch.write(out) > 0) {
                progressAt = System.nanoTime();
            }
        } finally {
            out.limit(limit);
        }
        if (out.hasRemaining()) {
            return false;
        }
        out = null;
        return true;
    }

    /** Whether the connection closes after this answer. */
    boolean closeAfter() {
        return closeAfter;
    }

    /** When the peer must have taken the whole answer. */
    long deadline() {
        return startedAt + config.writeTimeout().toNanos();
    }

    /** Whether the peer has taken none of the answer for the write stall time. */
    boolean stalled(long now) {
        return now - progressAt >= config.writeStall().toNanos();
    }

    /** How long the peer has taken none of the answer. */
    long untakenMillis(long now) {
        return TimeUnit.NANOSECONDS.toMillis(now - progressAt);
    }

    /** The action to start once the answer is sent (or its connection closed), replacing any before it. */
    void afterSent(Runnable action) {
        afterSent = action;
    }

    /** Starts the answer's after-sent action, never on this thread: it may stop the server, which joins it. */
    void sent() {
        Runnable action = afterSent;
        afterSent = null;
        if (action != null) {
            Thread.ofPlatform().name("ops-http-" + config.name() + "-after-sent").start(action);
        }
    }
}
