package dev.rbridge.nbd.server;

import dev.rbridge.common.splice.Pipe;
import dev.rbridge.common.splice.SocketDescriptor;
import dev.rbridge.nbd.device.BlockDevice;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The pipes of one connection's spliced READs (see {@link BlockDevice#readSpliced}), and its own descriptor of the
 * socket they are spliced into, made on the first READ that qualifies.
 *
 * <p>Bounds, since a client decides how many READs it sends: a pipe's bytes come from the connection's payload budget,
 * beside the READ's buffer, and only when nobody waits for memory (a pipe is an optimisation, never worth a wait); at
 * most {@link #MAX_PER_CONNECTION} pipes per connection and {@link #MAX_IN_PROCESS} in the process, idle ones
 * included, so descriptors stay far from the process's limit; idle pipes at most {@link #IDLE} per connection. Beyond
 * any bound a READ is copied, as before. When the kernel refuses a pipe (an unprivileged user past
 * fs.pipe-user-pages-soft), the process copies for {@link #REFUSED_BACKOFF_NANOS} before it asks again.
 */
final class ReadPipes {
    private static final Logger log = LoggerFactory.getLogger(ReadPipes.class);
    static final int MAX_PER_CONNECTION = 64;
    static final int MAX_IN_PROCESS = 1024;
    static final int IDLE = 4;
    static final long REFUSED_BACKOFF_NANOS = 10_000_000_000L;
    /** The largest pipe an unprivileged process may ask for (/proc/sys/fs/pipe-max-size), read once. */
    static final int MAX_PIPE = pipeMaxSize();

    private static final AtomicInteger IN_PROCESS = new AtomicInteger();
    /** System.nanoTime before which no pipe is asked for, after a refusal; 0 when none was refused. */
    private static volatile long refusedUntil;

    private final long id;
    private final SocketChannel channel;
    private final BlockDevice device;
    private final PayloadBudget.Account budget;
    private final ConcurrentLinkedQueue<Pipe> idle = new ConcurrentLinkedQueue<>();
    private final AtomicInteger open = new AtomicInteger();
    private volatile SocketDescriptor descriptor;
    /** No descriptor could be had: stop asking. */
    private boolean noDescriptor;
    private volatile boolean closed;

    /** For a plain connection whose device splices; the connection's thread takes pipes, any thread returns them. */
    ReadPipes(long id, SocketChannel channel, BlockDevice device, PayloadBudget.Account budget) {
        this.id = id;
        this.channel = channel;
        this.device = device;
        this.budget = budget;
    }

    /** Our descriptor of the socket, once a READ was spliced; the outbox splices through it. */
    SocketDescriptor descriptor() {
        return descriptor;
    }

    /**
     * A pipe for the READ of {@code length} bytes at {@code offset} when its data should be spliced, or null: copy.
     * Called by the connection's thread.
     */
    Pipe take(long offset, int length) {
        if (length < NbdServerConfig.SPLICE_READS_FROM || length > MAX_PIPE || noDescriptor
                || !device.splicesRead(offset, length)) {
            return null;
        }
        long until = refusedUntil;
        if (until != 0 && System.nanoTime() - until < 0) {
            return null;
        }
        if (descriptor == null && !describe()) {
            return null;
        }
        if (!budget.tryTake(length)) {
            return null;
        }
        Pipe p = idle.poll();
        if (p != null && p.capacity() >= length) {
            return p;
        } else if (p != null) {
            close(p); // too small for this READ: the next ones are likely of this size
        }
        if (open.get() >= MAX_PER_CONNECTION) {
            budget.release(length);
            return null;
        }
        if (IN_PROCESS.incrementAndGet() > MAX_IN_PROCESS) {
            IN_PROCESS.decrementAndGet();
            budget.release(length);
            return null;
        }
        try {
            p = Pipe.open(length);
            open.incrementAndGet();
            return p;
        } catch (IOException | RuntimeException e) {
            IN_PROCESS.decrementAndGet();
            budget.release(length);
            refusedUntil = System.nanoTime() + REFUSED_BACKOFF_NANOS;
            log.warn("READ data is copied, not spliced, for {} s: the kernel refused a pipe ({})",
                    REFUSED_BACKOFF_NANOS / 1_000_000_000L, e.getMessage());
            return null;
        }
    }

    private boolean describe() {
        try {
            descriptor = SocketDescriptor.of(channel);
            return true;
        } catch (IOException | RuntimeException e) {
            noDescriptor = true;
            log.debug("connection {}: READ data is copied, not spliced: {}", id, e.toString());
            return false;
        }
    }

    /** A READ is done with its pipe otherwise than by a written reply: closed, its bytes back to the budget. */
    void discard(Pipe pipe, int length) {
        close(pipe);
        budget.release(length);
    }

    /**
     * A spliced READ's reply was written (or dropped): its pipe, if empty, is kept for the next READ (a pipe costs four
     * system calls to make and close). Only here is a pipe kept: a READ that completed otherwise may have had an
     * attempt that failed while its lane was still splicing, and that lane may yet write into the pipe.
     */
    void done(Pipe pipe, int length) {
        if (pipe.held() != 0 || closed || idle.size() >= IDLE) {
            close(pipe);
        } else {
            idle.offer(pipe);
            if (closed && idle.remove(pipe)) {
                close(pipe); // the connection closed meanwhile and may not have seen it
            }
        }
        budget.release(length);
    }

    private void close(Pipe pipe) {
        pipe.close();
        open.decrementAndGet();
        IN_PROCESS.decrementAndGet();
    }

    /** The connection closed its channel: shuts our descriptor down with it (it would keep the socket open). */
    void closeDescriptor() {
        SocketDescriptor d = descriptor;
        if (d != null) {
            d.close();
        }
    }

    /** The connection is finished: closes the idle pipes, and the ones still in use as they come back. */
    void close() {
        closed = true;
        for (Pipe p; (p = idle.poll()) != null;) {
            close(p);
        }
        closeDescriptor();
    }

    private static int pipeMaxSize() {
        // Not Files.readString: it reads a sysctl file's first byte only ("1"), as the file reports no size.
        try {
            return Integer.parseInt(Files.readAllLines(Path.of("/proc/sys/fs/pipe-max-size")).getFirst().strip());
        } catch (IOException | RuntimeException e) {
            return 1 << 20; // the kernel's default
        }
    }
}
