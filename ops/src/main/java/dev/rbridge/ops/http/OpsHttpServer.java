package dev.rbridge.ops.http;

import dev.rbridge.common.Durations;
import dev.rbridge.common.PeerGroup;
import dev.rbridge.common.RateLimitedLog;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedSelectorException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The one HTTP server of rbridge's operator surface: admin interfaces, {@code /metrics}, {@code /healthz},
 * {@code /readyz}. A peer can hold only what it is given a bound for, and hitting a bound hurts only that peer:
 * <ul>
 *   <li>One selector thread accepts, reads and writes every connection without blocking, so a connection that
 *       sends a byte a second, or nothing, holds a slot and a few KiB, never a thread.</li>
 *   <li>Only complete, checked requests reach the worker pool ({@link OpsHttpConfig#WORKERS} threads, a bounded
 *       queue; 503 when it is full), which computes answers; the selector thread writes them. Whatever a handler
 *       throws, {@link Error}s included, is a 500. A request not answered within the handler timeout is a 503; a
 *       thread that cannot be stopped is interrupted and written off, and a replacement started in its place (at
 *       most one per worker at a time), so hung handlers cost a few threads, never the server.</li>
 *   <li>Request line, headers and body are bounded ({@link HttpRequestDecoder}); a request must arrive whole within
 *       the request timeout (408), a connection may wait for its next request only the idle timeout, and a peer
 *       must take its answer within the write timeout.</li>
 *   <li>Connections are capped globally and per peer address. At a cap, the oldest connection that is waiting for
 *       or half-way through a request, or stalling its answer (taking none of it for
 *       {@link OpsHttpConfig#WRITE_STALL}), is evicted before a new one is refused, preferring the peer that holds
 *       the most such connections: an attacker sharing 127.0.0.1 with a scraper evicts its own connections, while a
 *       request being answered, or an answer being taken however slowly, is never evicted.</li>
 *   <li>Every refusal, timeout and eviction is counted by reason ({@link OpsHttpMetrics}) and logged at most once
 *       per reason every 10 s ({@link RateLimitedLog}).</li>
 * </ul>
 * Keep-alive is HTTP/1.1's default; after an error answer the connection closes (lingering briefly so the peer
 * reads the answer rather than a reset).
 */
public final class OpsHttpServer implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(OpsHttpServer.class);
    private static final int READ_BUFFER = 4096;
    private static final int WRITE_SLICE = 256 << 10;
    private static final int ACCEPTS_PER_ROUND = 16;
    /** How long a failing accept (out of file descriptors) pauses accepting, instead of spinning on it. */
    private static final long ACCEPT_BACKOFF_NANOS = TimeUnit.MILLISECONDS.toNanos(100);
    /** Longest sleep of the selector when no deadline is nearer. */
    private static final long MAX_SELECT_NANOS = TimeUnit.SECONDS.toNanos(1);

    private enum State {
        /** Waiting for (the rest of) a request; evictable. */
        READING,
        /** A worker computes the answer; not evictable; cut off with a 503 at the handler timeout. */
        PROCESSING,
        /** Writing the answer; evictable once the peer has taken none of it for the write stall time. */
        WRITING,
        /** Output shut after an error answer, draining input until the peer closes or the linger ends; evictable. */
        LINGERING
    }

    private final OpsHttpConfig config;
    private final Handler handler;
    private final OpsHttpMetrics metrics;
    private final RateLimitedLog refusals;
    private final ServerSocketChannel listener;
    private final Selector selector;
    private final SelectionKey acceptKey;
    private final InetSocketAddress address;
    private final ThreadPoolExecutor workers;
    private final Thread loop;
    private final ConcurrentLinkedQueue<Runnable> fromWorkers = new ConcurrentLinkedQueue<>();
    private final AtomicInteger open = new AtomicInteger();
    // selector thread only
    /** Workers written off (stuck in a handler past its deadline) and replaced, until their handler returns. */
    private int replaced;
    private final List<Conn> conns = new ArrayList<>();
    /** By {@link PeerGroup}: an IPv4 address, an IPv6 /64. */
    private final Map<PeerGroup, Integer> perPeer = new HashMap<>();
    private long acceptPausedUntil;
    private boolean acceptPaused;
    private volatile boolean running = true;

    private OpsHttpServer(OpsHttpConfig config, Handler handler, OpsHttpMetrics metrics) throws IOException {
        this.config = config;
        this.handler = handler;
        this.metrics = metrics;
        this.refusals = new RateLimitedLog(log, TimeUnit.SECONDS.toNanos(10), System::nanoTime);
        this.selector = Selector.open();
        ServerSocketChannel ch = ServerSocketChannel.open();
        try {
            ch.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            ch.bind(config.address(), 128);
            ch.configureBlocking(false);
            this.acceptKey = ch.register(selector, SelectionKey.OP_ACCEPT);
        } catch (IOException | RuntimeException e) {
            ch.close();
            selector.close();
            throw e;
        }
        this.listener = ch;
        this.address = (InetSocketAddress) ch.getLocalAddress();
        AtomicInteger n = new AtomicInteger();
        this.workers = new ThreadPoolExecutor(config.workers(), config.workers(), 0, TimeUnit.MILLISECONDS,
                new ArrayBlockingQueue<>(config.queue()), r -> {
                    Thread t = new Thread(r, "ops-http-" + config.name() + "-worker-" + n.incrementAndGet());
                    t.setDaemon(true);
                    return t;
                }, new ThreadPoolExecutor.AbortPolicy());
        this.loop = Thread.ofPlatform().name("ops-http-" + config.name()).daemon().unstarted(this::run);
    }

    /**
     * Listens and serves until {@link #close()}.
     *
     * @throws IOException when the address cannot be bound ({@link java.net.BindException} when it is taken)
     */
    public static OpsHttpServer start(OpsHttpConfig config, Handler handler, OpsHttpMetrics metrics)
            throws IOException {
        OpsHttpServer s = new OpsHttpServer(config, handler, metrics);
        s.loop.start();
        return s;
    }

    /** The bound address (with the port chosen for port 0). */
    public InetSocketAddress address() {
        return address;
    }

    /** Connections open now. */
    public int openConnections() {
        return open.get();
    }

    /** The worker threads the pool may run now: its size plus one per replaced worker still stuck (for tests). */
    int workerThreads() {
        return workers.getCorePoolSize();
    }

    public OpsHttpConfig config() {
        return config;
    }

    // ------------------------------------------------------------------------------------------ selector thread

    private void run() {
        try {
            while (running) {
                try {
                    long now = System.nanoTime();
                    long next = sweep(now);
                    selector.select(Math.max(1, TimeUnit.NANOSECONDS.toMillis(next - now) + 1));
                    if (!running) {
                        break;
                    }
                    for (Runnable r; (r = fromWorkers.poll()) != null; ) {
                        try {
                            r.run();
                        } catch (RuntimeException e) { // one connection's trouble; the other answers still go out
                            refusals.warn("connection-failure", "{}", "ops http " + config.name()
                                    + ": handing an answer to its connection failed", e);
                        }
                    }
                    // connections first, newcomers last: a request that has arrived is read (and, once whole, can
                    // no longer be evicted) before a new connection in the same round could evict its sender
                    boolean acceptable = false;
                    Iterator<SelectionKey> it = selector.selectedKeys().iterator();
                    while (it.hasNext()) {
                        SelectionKey k = it.next();
                        it.remove();
                        if (k == acceptKey) {
                            acceptable = true;
                        } else if (k.attachment() instanceof Conn c) {
                            c.ready(k);
                        }
                    }
                    if (acceptable) {
                        accept();
                    }
                } catch (ClosedSelectorException e) {
                    break;
                } catch (Throwable t) { // nothing a peer sends may end the loop that serves the others
                    if (!running) {
                        break;
                    }
                    log.error("ops http {}: the selector loop failed and carries on", config.name(), t);
                    pauseQuietly();
                }
            }
        } finally {
            for (Conn c : new ArrayList<>(conns)) {
                c.close();
            }
        }
    }

    private void accept() {
        // a few per round, so a flood of connects cannot keep the loop from reading the connections it has
        for (int i = 0; i < ACCEPTS_PER_ROUND; i++) {
            SocketChannel ch;
            try {
                ch = listener.accept();
            } catch (IOException e) {
                // out of file descriptors, typically: stop accepting for a moment instead of spinning on it
                refusals.warn("accept", "{}", "ops http " + config.name() + ": accept failed: " + e.getMessage());
                acceptKey.interestOps(0);
                acceptPaused = true;
                acceptPausedUntil = System.nanoTime() + ACCEPT_BACKOFF_NANOS;
                return;
            }
            if (ch == null) {
                return;
            }
            try {
                admit(ch);
            } catch (IOException | RuntimeException e) {
                closeQuietly(ch);
                refusals.warn("admit", "{}", "ops http " + config.name() + ": could not take a connection: " + e);
            }
        }
    }

    private void admit(SocketChannel ch) throws IOException {
        InetSocketAddress peer = (InetSocketAddress) ch.getRemoteAddress();
        PeerGroup peerAddress = PeerGroup.of(peer.getAddress());
        Refusal cap = capMet(peerAddress);
        if (cap != null) {
            // may finish an answer or find its peer gone, freeing a slot
            probeStalledAnswers(cap == Refusal.PEER_LIMIT ? peerAddress : null);
            cap = capMet(peerAddress);
            if (cap != null) {
                Conn victim = oldestEvictable(cap == Refusal.PEER_LIMIT ? peerAddress : null, System.nanoTime());
                if (victim == null) {
                    refuseNew(ch, cap, cap == Refusal.PEER_LIMIT
                            ? "peer " + peerAddress + " has " + config.maxConnectionsPerPeer()
                                    + " connections, all busy"
                            : config.maxConnections() + " connections, all busy");
                    return;
                }
                victim.evict();
            }
        }
        ch.configureBlocking(false);
        ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
        Conn c = new Conn(ch, peer, (InetSocketAddress) ch.getLocalAddress());
        c.key = ch.register(selector, SelectionKey.OP_READ, c);
        conns.add(c);
        perPeer.merge(peerAddress, 1, Integer::sum);
        open.incrementAndGet();
    }

    /** The cap a newcomer from {@code peer} meets, the per-peer one first; null when it fits. */
    private Refusal capMet(PeerGroup peer) {
        if (perPeer.getOrDefault(peer, 0) >= config.maxConnectionsPerPeer()) {
            return Refusal.PEER_LIMIT;
        }
        return conns.size() >= config.maxConnections() ? Refusal.CONNECTION_LIMIT : null;
    }

    /**
     * Tries a write on every answer (of {@code peer}'s, or any) that looks stalled, before one is taken for
     * stalled. The kernel reports a socket writable only once a third of its send buffer is free, which a peer
     * reading slowly can take seconds to free: only a write tells it from a peer that reads nothing.
     */
    private void probeStalledAnswers(PeerGroup peer) {
        long now = System.nanoTime();
        for (Conn c : new ArrayList<>(conns)) {
            if (!c.closed && (peer == null || c.peerAddress.equals(peer)) && c.evictable(now)
                    && c.state == State.WRITING) {
                c.probe();
            }
        }
    }

    /**
     * The connection to evict for a newcomer: of {@code peer}'s, or (null) of the peer holding the most evictable
     * ones, the one that has waited longest in its current state; null when none is evictable.
     */
    private Conn oldestEvictable(PeerGroup peer, long now) {
        Map<PeerGroup, Integer> evictable = new HashMap<>();
        List<Conn> candidates = new ArrayList<>();
        for (Conn c : conns) {
            if (c.evictable(now) && (peer == null || c.peerAddress.equals(peer))) {
                evictable.merge(c.peerAddress, 1, Integer::sum);
                candidates.add(c);
            }
        }
        Conn best = null;
        for (Conn c : candidates) {
            if (best == null) {
                best = c;
                continue;
            }
            int mine = evictable.get(c.peerAddress);
            int theirs = evictable.get(best.peerAddress);
            if (mine > theirs || (mine == theirs && c.since - best.since < 0)) {
                best = c;
            }
        }
        return best;
    }

    /** Tells the newcomer why in one short non-blocking write (if its buffer takes it), then closes. */
    private void refuseNew(SocketChannel ch, Refusal reason, String why) {
        refused(reason, "refused a connection from " + remote(ch) + ": " + why);
        try {
            ch.configureBlocking(false);
            ch.write(config.errorPage().render(503, "too many connections; try again later").encode(false, true));
        } catch (IOException | RuntimeException e) {
            // the refusal is counted and logged; a peer that cannot take its 503 loses nothing more
        }
        closeQuietly(ch);
    }

    /** Closes what has overrun its deadline; returns when the next deadline falls. */
    private long sweep(long now) {
        long next = now + MAX_SELECT_NANOS;
        if (acceptPaused) {
            if (now - acceptPausedUntil >= 0) {
                acceptPaused = false;
                acceptKey.interestOps(SelectionKey.OP_ACCEPT);
            } else {
                next = acceptPausedUntil;
            }
        }
        for (Conn c : new ArrayList<>(conns)) {
            long deadline = c.deadline();
            if (deadline == Long.MAX_VALUE) {
                continue;
            }
            if (now - deadline >= 0) {
                c.expire();
            } else if (deadline - next < 0) {
                next = deadline;
            }
        }
        return next;
    }

    private void refused(Refusal reason, String message) {
        metrics.refused(reason);
        refusals.warn(reason.label(), "{}", "ops http " + config.name() + ": " + message);
    }

    private static String remote(SocketChannel ch) {
        try {
            return String.valueOf(ch.getRemoteAddress());
        } catch (IOException e) {
            return "(gone)";
        }
    }

    private static void closeQuietly(SocketChannel ch) {
        try {
            ch.close();
        } catch (IOException e) {
            // closing a socket we give up on: nothing left to do with it
        }
    }

    private static void pauseQuietly() {
        try {
            Thread.sleep(10);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** One connection; touched by the selector thread only (workers hand answers back through fromWorkers). */
    private final class Conn {
        final SocketChannel ch;
        final InetSocketAddress peer;
        final PeerGroup peerAddress;
        final InetSocketAddress local;
        final HttpRequestDecoder decoder = new HttpRequestDecoder(config.maxRequestLine(), config.maxHeaderBytes(),
                config.maxHeaders(), config.maxBody());
        final ByteBuffer in = ByteBuffer.allocate(READ_BUFFER);
        SelectionKey key;
        /** The request a worker answers (PROCESSING), until its answer is taken or it is cut off. */
        Job job;
        State state = State.READING;
        long since = System.nanoTime();
        /** When the peer last took some of the answer being written (or the writing began). */
        long progressAt;
        long requestStart;
        boolean served;
        ByteBuffer out;
        Runnable afterSent;
        boolean closeAfterWrite;
        boolean closed;

        Conn(SocketChannel ch, InetSocketAddress peer, InetSocketAddress local) {
            this.ch = ch;
            this.peer = peer;
            this.peerAddress = PeerGroup.of(peer.getAddress());
            this.local = local;
        }

        boolean evictable(long now) {
            return switch (state) {
                case READING, LINGERING -> true;
                case PROCESSING -> false;
                case WRITING -> now - progressAt >= config.writeStall().toNanos();
            };
        }

        long deadline() {
            return switch (state) {
                case READING -> requestStart != 0 ? requestStart + config.requestTimeout().toNanos()
                        : since + config.idleTimeout().toNanos();
                case PROCESSING -> since + config.handlerTimeout().toNanos();
                case WRITING -> since + config.writeTimeout().toNanos();
                case LINGERING -> since + config.linger().toNanos();
            };
        }

        void ready(SelectionKey k) {
            try {
                if (k.isValid() && k.isReadable()) {
                    readable();
                }
                if (!closed && k.isValid() && k.isWritable()) {
                    flush();
                }
            } catch (IOException e) {
                close(); // the peer reset or went away: its business
            } catch (RuntimeException e) { // a bug, not the peer's doing; still, the peer must not flood the log
                failed(e);
            }
        }

        /** Writes what the socket takes now, without waiting to be told it is writable. */
        void probe() {
            try {
                flush();
            } catch (IOException e) {
                close();
            } catch (RuntimeException e) {
                failed(e);
            }
        }

        private void failed(RuntimeException e) {
            refusals.warn("connection-failure", "{}", "ops http " + config.name() + ": connection from " + peer
                    + " failed", e);
            close();
        }

        private void readable() throws IOException {
            if (state == State.LINGERING) {
                in.clear();
                if (ch.read(in) < 0) {
                    close();
                }
                in.clear();
                return;
            }
            if (state != State.READING) {
                return;
            }
            if (ch.read(in) < 0) {
                close();
                return;
            }
            decode();
        }

        /** Decodes what {@code in} holds; dispatches a complete request or answers a broken one. */
        private void decode() {
            HttpRequest request;
            in.flip();
            try {
                request = decoder.next(in);
            } catch (HttpError e) {
                in.clear(); // the stream broke a rule: nothing after it can be framed
                refused(e.refusal(), "refused a request from " + peer + ": " + e.getMessage());
                answer(render(e), true, false);
                return;
            }
            in.compact();
            if (request == null) {
                if (decoder.inProgress() && requestStart == 0) {
                    requestStart = System.nanoTime();
                }
                return;
            }
            requestStart = 0;
            served = true;
            state = State.PROCESSING;
            since = System.nanoTime();
            key.interestOps(0); // the next pipelined request waits in the buffer; TCP pushes back on the rest
            job = new Job(this, request.from(peer, local));
            try {
                workers.execute(job);
            } catch (RejectedExecutionException e) {
                boolean head = job.head;
                job = null;
                refused(Refusal.BUSY, "refused a request from " + peer + ": every worker busy and "
                        + config.queue() + " requests queued");
                answer(config.errorPage().render(503, "busy; try again later").encode(head, true), true);
            }
        }

        void answer(ByteBuffer bytes, boolean close) {
            if (closed) {
                return;
            }
            out = bytes;
            closeAfterWrite = close;
            state = State.WRITING;
            since = System.nanoTime();
            progressAt = since;
            try {
                flush();
            } catch (IOException e) {
                close();
            }
        }

        private void answer(HttpResponse response, boolean close, boolean head) {
            answer(response.encode(head, close), close);
        }

        private void flush() throws IOException {
            if (state != State.WRITING) {
                return;
            }
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
                key.interestOps(SelectionKey.OP_WRITE);
                return;
            }
            out = null;
            sent();
            if (closeAfterWrite) {
                // stop writing, keep reading a moment: closing with unread input would reset the answer away
                ch.shutdownOutput();
                state = State.LINGERING;
                since = System.nanoTime();
                key.interestOps(SelectionKey.OP_READ);
                return;
            }
            state = State.READING;
            since = System.nanoTime();
            decode();
            if (state == State.READING) {
                key.interestOps(SelectionKey.OP_READ);
            }
        }

        void expire() {
            switch (state) {
                case READING -> {
                    if (requestStart != 0) {
                        refused(Refusal.REQUEST_TIMEOUT, "request from " + peer + " not complete within "
                                + Durations.human(config.requestTimeout()));
                        requestStart = 0;
                        answer(config.errorPage().render(408, "request not complete within "
                                + Durations.human(config.requestTimeout())), true, false);
                    } else {
                        if (!served) { // a keep-alive connection going quiet after its requests is normal
                            refused(Refusal.IDLE_TIMEOUT, "connection from " + peer + " sent nothing for "
                                    + Durations.human(config.idleTimeout()));
                        }
                        close();
                    }
                }
                case WRITING -> {
                    refused(Refusal.WRITE_TIMEOUT, "peer " + peer + " did not take its answer within "
                            + Durations.human(config.writeTimeout()));
                    close();
                }
                case LINGERING -> close();
                case PROCESSING -> {
                    Job j = job;
                    if (!j.cutOff()) {
                        j.deliver(); // answered just now: take it here rather than wait for the worker's hand-off
                        return;
                    }
                    job = null;
                    refused(Refusal.HANDLER_TIMEOUT, "no answer to " + j.what() + " from " + peer + " within "
                            + Durations.human(config.handlerTimeout()));
                    answer(config.errorPage().render(503, "no answer within "
                            + Durations.human(config.handlerTimeout()) + "; try again later"), true, j.head);
                }
            }
        }

        void evict() {
            long now = System.nanoTime();
            String why = state == State.WRITING
                    ? "its answer untaken for " + TimeUnit.NANOSECONDS.toMillis(now - progressAt) + " ms"
                    : state.name().toLowerCase(Locale.ROOT) + " for " + TimeUnit.NANOSECONDS.toMillis(now - since)
                            + " ms";
            refused(Refusal.EVICTED, "evicted a connection from " + peer + " (" + why + ") for a new one");
            if (state == State.READING && decoder.inProgress()) {
                try { // one non-blocking try to say why to a client that is half-way through a request
                    ch.write(config.errorPage().render(503, "evicted for a newer connection; too many connections")
                            .encode(false, true));
                } catch (IOException | RuntimeException e) {
                    // evicted all the same
                }
            }
            close();
        }

        /** Starts the answer's after-sent action, never on this thread: it may stop the server, which joins it. */
        private void sent() {
            Runnable action = afterSent;
            afterSent = null;
            if (action != null) {
                Thread.ofPlatform().name("ops-http-" + config.name() + "-after-sent").start(action);
            }
        }

        void close() {
            if (closed) {
                return;
            }
            closed = true;
            sent(); // an accepted operation goes ahead even if its caller did not wait for the answer
            if (key != null) {
                key.cancel();
            }
            closeQuietly(ch);
            conns.remove(this);
            perPeer.computeIfPresent(peerAddress, (a, n) -> n > 1 ? n - 1 : null);
            open.decrementAndGet();
        }
    }

    // ------------------------------------------------------------------------------------------ worker threads

    /**
     * One request on its way through the worker pool. The selector thread and the worker that runs it agree through
     * {@link #phase} on who ends it: the worker by finishing (DONE, its answer handed to the selector thread), or
     * the selector thread by cutting it off at the handler timeout (CUT_OFF, a 503 already sent); whichever comes
     * second only cleans up.
     */
    private final class Job implements Runnable {
        private static final int QUEUED = 0;
        private static final int RUNNING = 1;
        private static final int DONE = 2;
        private static final int CUT_OFF = 3;

        final Conn conn;
        final HttpRequest request;
        final boolean head;
        final boolean close;
        private final AtomicInteger phase = new AtomicInteger(QUEUED);
        private volatile Thread runner;
        private volatile long startedAt;
        // written by the worker before DONE, read by the selector thread after it
        private ByteBuffer bytes;
        private Runnable afterSent;
        // selector thread only
        private boolean replaced;

        Job(Conn conn, HttpRequest request) {
            this.conn = conn;
            this.request = request;
            this.head = request.method().equals("HEAD");
            this.close = !request.keepAlive();
        }

        /** On a worker. Never throws: whatever happens, the selector thread hears of it. */
        @Override
        public void run() {
            startedAt = System.nanoTime(); // before RUNNING: whoever sees RUNNING sees these
            runner = Thread.currentThread();
            if (!phase.compareAndSet(QUEUED, RUNNING)) {
                return; // cut off while it waited in the queue: its peer has its 503
            }
            try {
                HttpResponse response = compute();
                ByteBuffer encoded;
                try {
                    encoded = response.encode(head, close);
                } catch (RuntimeException | Error e) { // never leave a connection waiting for an answer
                    metrics.refused(Refusal.INTERNAL_ERROR);
                    log.error("ops http {}: the answer to {} cannot be encoded", config.name(), what(), e);
                    response = config.errorPage().render(500, "internal error: the answer cannot be encoded");
                    encoded = response.encode(head, close);
                }
                bytes = encoded;
                afterSent = response.afterSent();
            } catch (Throwable t) { // not even a 500 could be made (out of memory, typically): the connection closes
                bytes = null;
                afterSent = null;
                try {
                    log.error("ops http {}: no answer could be made to {}; closing its connection", config.name(),
                            what(), t);
                } catch (Throwable ignored) {
                    // nothing left to say it with
                }
            } finally {
                runner = null;
                post(phase.compareAndSet(RUNNING, DONE) ? this::deliver : () -> retire(this));
            }
        }

        /** The handler's answer; whatever it throws, {@link Error}s included, is an answer too. */
        private HttpResponse compute() {
            try {
                HttpResponse response = handler.handle(request);
                if (response == null) {
                    throw new IllegalStateException("the handler gave no answer to " + what());
                }
                return response;
            } catch (HttpError e) {
                refused(e.refusal(), "refused " + what() + " from " + request.peer() + ": " + e.getMessage());
                return render(e);
            } catch (Throwable e) { // StackOverflowError and OutOfMemoryError too: the peer gets its 500
                if (phase.get() != CUT_OFF) { // else it is our interrupt, and the peer was told and counted
                    metrics.refused(Refusal.INTERNAL_ERROR);
                    log.error("ops http {}: {} failed", config.name(), what(), e);
                }
                return config.errorPage().render(500, "internal error: " + e);
            }
        }

        private String what() {
            return AdminRules.printable(request.method()) + " " + AdminRules.printable(request.path());
        }

        /**
         * Selector thread, at the handler timeout: cuts the request off unless it is done (then false). A request
         * still queued leaves the queue; a worker still in the handler is interrupted and written off.
         */
        boolean cutOff() {
            int was = phase.getAndUpdate(p -> p == DONE ? DONE : CUT_OFF);
            switch (was) {
                case DONE -> {
                    return false;
                }
                case QUEUED -> workers.remove(this);
                default -> writeOff(this);
            }
            return true;
        }

        /** Selector thread: hands the answer to the connection, once (the worker's hand-off or the timeout). */
        void deliver() {
            if (conn.job != this) {
                return;
            }
            conn.job = null;
            if (bytes == null) {
                conn.close();
                return;
            }
            conn.afterSent = afterSent;
            if (conn.closed) {
                conn.sent(); // an accepted operation goes ahead even if its caller did not wait for the answer
            } else {
                conn.answer(bytes, close);
            }
        }
    }

    /** Hands work to the selector thread; if even that fails, the handler timeout still ends the connection. */
    private void post(Runnable r) {
        try {
            fromWorkers.add(r);
            selector.wakeup();
        } catch (Throwable t) {
            // out of memory: the selector thread's deadline for the connection still holds
        }
    }

    /**
     * Selector thread: a worker stays in a handler past the handler timeout. A thread cannot be stopped, only
     * interrupted (a handler blocked in an interruptible wait returns); so it is written off, and the pool grows by
     * one in its place, until its handler returns ({@link #retire}). At most {@link OpsHttpConfig#workers()}
     * threads are replaced at a time: beyond that, hung handlers cost answers (503), never more threads.
     */
    private void writeOff(Job job) {
        Thread t = job.runner;
        if (t != null) {
            t.interrupt();
        }
        String stuck = "ops http " + config.name() + ": a worker is still in " + job.what() + " after "
                + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - job.startedAt) + " ms, at the "
                + Durations.human(config.handlerTimeout()) + " handler timeout; ";
        if (replaced < config.workers()) {
            replaced++;
            job.replaced = true;
            workers.setMaximumPoolSize(workers.getMaximumPoolSize() + 1);
            workers.setCorePoolSize(workers.getCorePoolSize() + 1);
            refusals.error("worker-written-off", "{}", stuck + "written off and replaced (" + replaced
                    + " replaced until their handlers return)");
        } else {
            refusals.error("worker-written-off", "{}", stuck + "written off, not replaced: " + replaced
                    + " replaced already");
        }
    }

    /** Selector thread: the handler of a written-off worker returned; the pool gives back the thread it added. */
    private void retire(Job job) {
        if (job.replaced) {
            job.replaced = false;
            replaced--;
            workers.setCorePoolSize(workers.getCorePoolSize() - 1);
            workers.setMaximumPoolSize(workers.getMaximumPoolSize() - 1);
        }
    }

    private HttpResponse render(HttpError e) {
        return config.errorPage().render(e.status(), e.getMessage()).withHeaders(e.headers());
    }

    /** Stops listening, closes every connection and stops the workers. */
    @Override
    public void close() {
        if (!running) {
            return;
        }
        running = false;
        selector.wakeup();
        try {
            loop.join(TimeUnit.SECONDS.toMillis(5));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        workers.shutdownNow();
        try {
            listener.close();
        } catch (IOException e) {
            log.debug("ops http {}: closing the listener: {}", config.name(), e.toString());
        }
        try {
            selector.close();
        } catch (IOException e) {
            log.debug("ops http {}: closing the selector: {}", config.name(), e.toString());
        }
    }

    /** For log lines: {@code http://HOST:PORT}. */
    @Override
    public String toString() {
        return "http://" + address.getHostString() + ":" + address.getPort();
    }
}
