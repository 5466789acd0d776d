package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.wire.MessageEncoder;
import dev.rbridge.rdma.wire.Protocol;

import java.io.IOException;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import dev.rbridge.rdma.link.Link;
import java.util.Arrays;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;

/**
 * The request-writing role of a tcp client connection. Requests are queued in issue order (FIFO keeps FLUSH behind
 * what was issued before it) and written in batches: encoded together into one direct buffer, WRITE data straight from
 * the caller's memory, in one gathering write. Whoever writes takes the write lock; a thread that finds it taken leaves
 * its request to the holder, who looks again after unlocking.
 *
 * <p>The thread that reads replies must never block in a write the memserver's replies are stuck behind (the classic
 * deadlock of a full-duplex stream), so it writes only what cannot block for long ({@link #writeBesideReplies}) and
 * leaves the rest to this role's flusher thread, which may wait.
 */
final class RequestWriter {
    /** Most buffers in one gathering write (Linux IOV_MAX is 1024). */
    private static final int MAX_VECTOR = 1024;

    private final Link channel;
    /** Whether the connection is still open. */
    private final BooleanSupplier open;
    /** The connection lost its socket while writing: it closes. */
    private final Consumer<IOException> lost;
    /** A queued request too large for the batch buffer, taken off the queue unsent: its call fails. */
    private final Consumer<TcpCall> unsendable;
    private final ReentrantLock writeLock = new ReentrantLock();
    private final ConcurrentLinkedQueue<TcpCall> outgoing = new ConcurrentLinkedQueue<>();
    private final AtomicLong outgoingBytes = new AtomicLong();
    /** Reply bytes of requests written and not yet answered: what the memserver may send before reading more. */
    private final AtomicLong writtenReplyBytes = new AtomicLong();
    /**
     * Request bytes, weighed as the kernel charges them, of requests written and not yet answered: an upper bound on
     * what sits in our socket's send buffer (the reply to a request acknowledges its bytes).
     */
    private final AtomicLong writtenRequestBytes = new AtomicLong();
    /**
     * Most reply bytes that may be outstanding when the thread reading replies writes a request itself: a quarter of
     * the socket's receive buffer as the kernel reports it (twice the {@link TcpSockets#SOCKET_BUFFER} asked for, of
     * which part goes to bookkeeping), so that the memserver can always write every reply it owes without blocking, and
     * so always goes on reading what we write. The size is fixed (set explicitly, so the kernel does not autotune it).
     */
    private final long safeReplyBytes;
    /**
     * Most request bytes that may be outstanding when the thread reading replies writes a request itself: a quarter of
     * the socket's send buffer as reported, so that the write fits in it whatever the memserver does.
     */
    private final long safeRequestBytes;
    /**
     * Where a batch's requests are encoded (WRITE data apart): room for the largest request a connection sends (it
     * refuses larger ones before they are queued); used only under writeLock.
     */
    private final ByteBuffer out = ByteBuffer.allocateDirect(Protocol.HEADER + Protocol.MAX_CONTROL_BODY)
            .order(ByteOrder.LITTLE_ENDIAN);
    /** The gathering write's buffers; used only under writeLock. */
    private final ByteBuffer[] vector = new ByteBuffer[MAX_VECTOR];
    /** Writes what the reader may not write itself (see {@link #writeBesideReplies}). */
    private final Thread flusher;

    RequestWriter(Link channel, String peer, BooleanSupplier open, Consumer<IOException> lost,
            Consumer<TcpCall> unsendable) throws IOException {
        this.channel = channel;
        this.open = open;
        this.lost = lost;
        this.unsendable = unsendable;
        this.safeReplyBytes = channel.socket().getOption(StandardSocketOptions.SO_RCVBUF) / 4;
        this.safeRequestBytes = channel.socket().getOption(StandardSocketOptions.SO_SNDBUF) / 4;
        this.flusher = new Thread(this::flushLoop, "rdma-tcp-flusher-" + peer);
        flusher.setDaemon(true);
    }

    void start() {
        flusher.start();
    }

    /** Queues {@code c} (registered, waiting for its reply); returns the bytes queued and not written, its own too. */
    long enqueue(TcpCall c, long wireBytes) {
        outgoing.add(c);
        return outgoingBytes.addAndGet(wireBytes);
    }

    /** Nothing is queued. */
    boolean idle() {
        return outgoing.isEmpty();
    }

    /** {@code c}'s reply is in: what it weighed on the socket buffers is free again. */
    void answered(TcpCall c) {
        writtenReplyBytes.addAndGet(-c.replyWeight);
        writtenRequestBytes.addAndGet(-c.requestWeight);
    }

    /** Has the flusher write what is queued (the calling thread must not block writing it). */
    void wakeFlusher() {
        LockSupport.unpark(flusher);
    }

    /**
     * Writes what is queued, combining: whoever gets the lock writes everyone's requests; a thread that finds the
     * lock taken leaves its request to the holder, who looks again after unlocking. Never called by a thread that reads
     * replies: one blocked in a write, while the memserver blocks writing replies it does not read, is the classic
     * deadlock of a full-duplex stream.
     */
    void drain() {
        while (!outgoing.isEmpty() && writeLock.tryLock()) {
            try {
                writeBatch(Long.MAX_VALUE, Long.MAX_VALUE);
            } catch (IOException e) {
                lost.accept(e);
            } finally {
                writeLock.unlock();
            }
        }
        if (!open.getAsBoolean()) {
            outgoing.clear();
        }
    }

    /**
     * The thread that reads replies writing queued requests itself (saving a hand-off to the flusher per request), as
     * far as that is safe, which is either of:
     * <ul>
     * <li>the replies owed, this batch's included, fit in {@link #safeReplyBytes}: the memserver answers in order, so
     * while this thread is blocked in the write it can only owe replies that fit in our receive buffer; it never
     * blocks writing them and so never stops reading what we write (large WRITEs: small replies);
     * <li>the requests not yet answered, this batch included, fit in {@link #safeRequestBytes}: every byte not yet
     * acknowledged fits in our send buffer, so the write returns whatever the memserver does (READs: small requests).
     * </ul>
     * True when nothing is left for the flusher.
     */
    boolean writeBesideReplies() {
        if (!writeLock.tryLock()) {
            return false;
        }
        try {
            writeBatch(safeReplyBytes - writtenReplyBytes.get(), safeRequestBytes - writtenRequestBytes.get());
        } catch (IOException e) {
            lost.accept(e);
            return true;
        } finally {
            writeLock.unlock();
        }
        return outgoing.isEmpty();
    }

    private void flushLoop() {
        while (open.getAsBoolean()) {
            if (outgoing.isEmpty()) {
                LockSupport.park(this);
                continue;
            }
            writeLock.lock(); // the flusher may wait: it is not the thread that reads replies
            try {
                while (!outgoing.isEmpty() && open.getAsBoolean()) {
                    writeBatch(Long.MAX_VALUE, Long.MAX_VALUE); // takes at least the head, without budgets
                }
            } catch (IOException e) {
                lost.accept(e);
            } finally {
                writeLock.unlock();
            }
            drain(); // anything queued while we were unlocking
        }
    }

    /**
     * Writes queued requests, encoded together into one direct buffer, WRITE data straight from the caller; taking
     * requests only while the reply bytes they will bring stay within {@code replyBudget} or the request bytes written
     * stay within {@code requestBudget} (see {@link #writeBesideReplies}): checked for each prefix of the batch, so the
     * whole batch meets one of the two. A head request that could never fit the batch buffer is taken off the queue
     * and failed ({@link #unsendable}) rather than left to block every request behind it.
     */
    private void writeBatch(long replyBudget, long requestBudget) throws IOException {
        ByteBuffer[] v = vector;
        long replies = 0;
        long requests = 0;
        int n = 0;
        long bytes = 0;
        out.clear();
        int headStart = 0;
        TcpCall o;
        while ((o = outgoing.peek()) != null && o.encodedSize > out.capacity()) {
            outgoing.poll();
            outgoingBytes.addAndGet(-o.encodedSize - (o.data == null ? 0 : o.data.remaining()));
            unsendable.accept(o);
        }
        while (n < MAX_VECTOR - 1 && (o = outgoing.peek()) != null && o.encodedSize <= out.remaining()
                && (replies + o.replyWeight <= replyBudget || requests + o.requestWeight <= requestBudget)) {
            outgoing.poll();
            replies += o.replyWeight;
            requests += o.requestWeight;
            bytes += o.encodedSize;
            MessageEncoder.encode(o.request, out);
            if (o.data != null) {
                v[n++] = out.slice(headStart, out.position() - headStart);
                headStart = out.position();
                v[n++] = o.data;
                bytes += o.data.remaining();
            }
        }
        if (out.position() > headStart) {
            v[n++] = out.slice(headStart, out.position() - headStart);
        }
        outgoingBytes.addAndGet(-bytes);
        writtenReplyBytes.addAndGet(replies); // before the bytes go: a reply can come back before write returns
        writtenRequestBytes.addAndGet(requests);
        int first = 0;
        try {
            while (first < n) {
                channel.write(v, first, n - first);
                while (first < n && !v[first].hasRemaining()) {
                    first++;
                }
            }
        } finally {
            Arrays.fill(v, 0, n, null); // keep no caller's buffer reachable
        }
    }
}
