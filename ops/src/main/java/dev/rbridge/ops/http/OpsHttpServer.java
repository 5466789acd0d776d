package dev.rbridge.ops.http;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;

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
 *       per reason every 10 s ({@link RefusalLog}).</li>
 * </ul>
 * Keep-alive is HTTP/1.1's default; after an error answer the connection closes (lingering briefly so the peer
 * reads the answer rather than a reset).
 * <p>
 * This class binds the address and puts the pieces together: {@link SelectorLoop} (the selector thread),
 * {@link HttpConnectionSlots} (accepting, caps, eviction), {@link HttpConnection} (one connection's states and
 * deadlines), {@link ResponseWriter}, {@link WorkerPool} with its {@link HandlerJob}s, {@link SelectorHandOff}
 * (workers to the selector thread) and {@link RefusalLog}.
 */
public final class OpsHttpServer implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(OpsHttpServer.class);

    private final OpsHttpConfig config;
    private final ServerSocketChannel listener;
    private final Selector selector;
    private final InetSocketAddress address;
    private final WorkerPool workers;
    private final HttpConnectionSlots slots;
    private final SelectorLoop loop;

    private OpsHttpServer(OpsHttpConfig config, Handler handler, OpsHttpMetrics metrics) throws IOException {
        this.config = config;
        RefusalLog refusals = new RefusalLog(config.name(), metrics);
        this.selector = Selector.open();
        ServerSocketChannel ch = ServerSocketChannel.open();
        SelectionKey acceptKey;
        try {
            ch.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            ch.bind(config.address(), 128);
            ch.configureBlocking(false);
            acceptKey = ch.register(selector, SelectionKey.OP_ACCEPT);
        } catch (IOException | RuntimeException e) {
            ch.close();
            selector.close();
            throw e;
        }
        this.listener = ch;
        this.address = (InetSocketAddress) ch.getLocalAddress();
        SelectorHandOff handOff = new SelectorHandOff(selector);
        this.workers = new WorkerPool(config, handler, refusals, handOff);
        this.slots = new HttpConnectionSlots(workers, acceptKey);
        this.loop = new SelectorLoop(config.name(), refusals, selector, acceptKey, slots, handOff);
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
        return slots.open();
    }

    /** The worker threads the pool may run now: its size plus one per replaced worker still stuck (for tests). */
    int workerThreads() {
        return workers.threads();
    }

    public OpsHttpConfig config() {
        return config;
    }

    /** Stops listening, closes every connection and stops the workers. */
    @Override
    public void close() {
        if (!loop.stop()) {
            return;
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
