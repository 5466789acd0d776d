package dev.rbridge.rdma.ucx;

import dev.rbridge.common.RateLimitedLog;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.KeyEnforcement;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.wire.Admission;
import dev.rbridge.rdma.wire.ControlDispatcher;
import dev.rbridge.rdma.wire.GatedListener;
import dev.rbridge.rdma.wire.MalformedMessageException;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageDecoder;
import dev.rbridge.rdma.wire.MessageEncoder;
import dev.rbridge.rdma.wire.MessageReader;
import dev.rbridge.rdma.wire.Protocol;
import dev.rbridge.rdma.wire.WireBytes;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpEndpointParams;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import dev.rbridge.rdma.link.Link;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The memserver end of one ucx-provider control connection, on its own thread: the control protocol of the {@code
 * wire} package (the greeting, the region and lease operations, ZERO and FLUSH, as every transport serves them) plus
 * UCX_CONNECT, UCX_PROBE and MAP. Replies that wait for other clients to forget a key (RELEASE, a LEASE that rotated a volume's
 * keys) are sent when they have, without holding up this connection's other requests.
 *
 * <p>Whatever another connection's thread (or the timer) has to send to this client, a deferred reply or an
 * INVALIDATE, goes out on a virtual thread of its own: a client that stops reading blocks its own sends only, never a
 * thread that serves someone else.
 */
final class UcxServerConnection implements GatedListener.Connection {
    private static final Logger log = LoggerFactory.getLogger(UcxServerConnection.class);
    private static final RateLimitedLog limited = new RateLimitedLog(log);
    /** Input buffer: a whole HELLO, and a burst of small requests after it. */
    private static final int INPUT = 8 << 10;
    /** LIST replies go out in pieces of about this size, so no reply's size decides an allocation. */
    private static final int LIST_CHUNK = 64 << 10;

    private final UcxListener listener;
    private final SocketChannel channel;
    /** The greeting, the hello guard, and the counting of refusals. */
    private final Admission admission;
    private final String peer;
    private final ConnectionStats stats = new ConnectionStats();
    private final MessageDecoder decoder = MessageDecoder.forMemserver();
    /** Over {@link #link}, once it is set up. */
    private MessageReader requests;
    /** The control socket, or TLS over it; set first thing, by the connection's thread. */
    private volatile Link link;
    private final Object writeLock = new Object();
    private final AtomicLong pushIds = new AtomicLong();
    private final Map<Long, CompletableFuture<Boolean>> pushes = new ConcurrentHashMap<>();
    /** This memserver's endpoint to the client's worker (see {@link #connectBack}); held: JUCX's handler ref is weak. */
    private volatile UcpEndpoint endpoint;
    private boolean endpointMade;
    /** Set once the endpoint is to go (a fence, a disconnect, the end of the connection); it may not be made yet. */
    private final AtomicBoolean dataPathCut = new AtomicBoolean();
    /** The endpoint was closed: the progress thread's only, so nothing asks UCX about it afterwards. */
    private boolean endpointClosed;
    /** Whether the NIC checks the keys this client uses, found at its first MAP ({@link #checkKeys}). */
    private volatile KeyEnforcement keys;
    /** What {@link #keys} says before the first MAP: unknown, so not enforced. */
    private static final KeyEnforcement UNCHECKED = new KeyEnforcement(false, "not checked yet (no MAP so far)");

    UcxServerConnection(UcxListener listener, SocketChannel channel, Admission admission) {
        this.listener = listener;
        this.channel = channel;
        this.admission = admission;
        this.peer = admission.peer();
    }

    /**
     * Closes the control connection and, at once, the UCX endpoint to the client: the hello guard, a timeout, the
     * listener's close and the memserver's disconnect (an operator's, or a drained takeover fencing this client) all
     * cut the data path too, without waiting for this connection's thread to notice.
     */
    @Override
    public void close() {
        try {
            channel.close();
        } catch (IOException e) {
            log.debug("close failed", e);
        }
        closeEndpoint();
    }

    /** A fence: the client's UCX endpoint goes now (on RDMA, its queue pairs); its control connection stays. */
    void cutDataPath() {
        log.info("client {}: closing its UCX endpoint (fenced: a lease taken over, or a region revoked)", peer);
        closeEndpoint();
    }

    /** The client's address, for log lines and operators. */
    String peer() {
        return peer;
    }

    /** Whether the NIC checks the remote keys this client uses; not enforced until its first MAP tells. */
    KeyEnforcement keys() {
        KeyEnforcement k = keys;
        return k == null ? UNCHECKED : k;
    }

    @Override
    public void run() {
        try {
            Ucx.tuneControlSocket(channel);
            link = Link.plain(channel); // a client refused for speaking in clear is told so in clear
            link = admission.link(channel);
            requests = new MessageReader(link, decoder,
                    ByteBuffer.allocate(INPUT).order(ByteOrder.LITTLE_ENDIAN).flip());
            RegionService.Session s = greet();
            if (s != null) {
                serve(s);
            }
        } catch (IOException | MalformedMessageException | RuntimeException | OutOfMemoryError e) {
            Message.Error bye = admission.failed(e);
            if (bye != null) {
                trySend(bye);
                discardInput();
            }
        } finally {
            close();
            pushes.values().forEach(f -> f.complete(false));
            listener.ended(this);
            admission.closed();
        }
    }

    /** Reads what the client already sent before closing, so the close is a FIN the client sees, not a reset. */
    private void discardInput() {
        try {
            channel.shutdownOutput();
            channel.configureBlocking(false);
            ByteBuffer scratch = ByteBuffer.allocate(64 << 10);
            for (int i = 0; i < 16 && channel.read(scratch.clear()) > 0; i++) {
                // discard
            }
        } catch (IOException e) {
            log.debug("discarding {}'s input: {}", peer, e.getMessage());
        }
    }

    /** The admitted client's session, or null when the greeting ended the connection. */
    private RegionService.Session greet() throws IOException, MalformedMessageException {
        Admission.Greeting greeting = admission.greet(requests.next());
        while (greeting instanceof Admission.Challenge c) {
            send(c.reply());
            greeting = admission.greet(requests.next());
        }
        switch (greeting) {
            case Admission.Challenge c -> throw new IllegalStateException("answered above");
            case Admission.Refused r -> {
                if (r.reply() != null) {
                    trySend(r.reply());
                }
                return null;
            }
            case Admission.Admitted a -> {
                a.session().attach(stats, this::close);
                send(a.welcome());
                return a.session();
            }
        }
    }

    private void serve(RegionService.Session s) throws IOException, MalformedMessageException {
        while (true) {
            Message m = requests.next();
            stats.recvMessages.increment();
            stats.recvBytes.add(Protocol.HEADER + (long) decoder.length());
            switch (m) {
                case Message.Read r -> send(notHere(r));
                case Message.Write w -> {
                    decoder.skipPayload();
                    send(notHere(w));
                }
                case Message.InvalidateDone d -> { // a client's answer to our INVALIDATE
                    CompletableFuture<Boolean> f = pushes.remove(d.id());
                    if (f != null) {
                        f.complete(true);
                    }
                }
                case Message.ListRegions l -> list(s, l);
                case Message.Release r -> {
                    Message reply = ControlDispatcher.answer(s, r);
                    if (reply instanceof Message.Error) {
                        send(reply);
                    } else {
                        // Every client that holds the region's remote key forgets it before the memory may go.
                        listener.invalidate(List.of(r.regionId()), false)
                                .whenComplete((v, e) -> replyAfterWithdrawal(reply, e));
                    }
                }
                case Message.Lease l -> {
                    Message reply = ControlDispatcher.answer(s, l);
                    // Fencing: a grant other than a renewal rotated the keys; every client forgets the remote keys
                    // of the volume's regions whose registration no longer matches a key, and their memory is
                    // registered afresh (new remote keys) when the new holder maps it.
                    List<Long> stale = reply instanceof Message.Error ? List.of()
                            : listener.staleRegistrations(s, l.volume());
                    if (stale.isEmpty()) {
                        send(reply);
                    } else {
                        listener.fence(stale, this).whenComplete((v, e) -> replyAfterWithdrawal(reply, e));
                    }
                }
                case Message.UcxConnect u -> {
                    connectBack(u.workerAddress().buffer());
                    send(new Message.UcxConnectReply(u.id(), WireBytes.copyOf(listener.workerAddress)));
                }
                case Message.UcxProbe p -> send(new Message.UcxProbeReply(p.id(), listener.probe.address(),
                        WireBytes.copyOf(listener.probe.remoteKey())));
                case Message.MapRegion r -> map(s, r);
                default -> send(ControlDispatcher.answer(s, m));
            }
        }
    }

    /** Sends a reply that waited for remote keys to be withdrawn; a withdrawal that failed is said, not swallowed. */
    private void replyAfterWithdrawal(Message reply, Throwable failure) {
        if (failure != null) {
            log.warn("client {}: withdrawing remote keys failed: {}", peer, failure.toString());
        }
        sendLater(reply);
    }

    /**
     * Makes this memserver's endpoint to the client's worker, before the client makes its own to ours: UCX pairs the
     * two (the first endpoint each side makes to the other's worker), so the endpoint UCX uses to answer the client,
     * which it would otherwise make by itself with no error handler (a reply it cannot deliver, to a client that went
     * away, then aborts the memserver), is this one. Its error handler ends the control connection; the end of the
     * control connection closes it, forcibly, which tears down the client's transport connections (on RDMA, its
     * queue pairs): a client cut off or fenced here moves no more data, whatever its keys. One per connection, made
     * once; a client that predates this (no address) is served as before.
     */
    private void connectBack(ByteBuffer clientAddress) throws IOException {
        if (!clientAddress.hasRemaining() || endpointMade) {
            return;
        }
        endpointMade = true;
        ByteBuffer address = ByteBuffer.allocateDirect(clientAddress.remaining()).put(clientAddress).flip();
        try {
            endpoint = listener.loop.call(() -> listener.loop.worker.newEndpoint(new UcpEndpointParams()
                    .setUcpAddress(address).setPeerErrorHandlingMode().setName("rbridge-client-" + peer)
                    .setErrorHandler((ep, status, message) -> {
                        limited.info("client_endpoint", "UCX lost client {} ({}); its connection ends", peer, message);
                        close();
                    })), listener.helloTimeoutMillis());
        } catch (Exception e) {
            throw new IOException("UCX could not make an endpoint to client " + peer + ": " + e.getMessage(), e);
        }
        if (dataPathCut.get()) { // cut while it was being made: whoever cut it may have found no endpoint yet
            closeEndpoint();
        }
    }

    /**
     * Closes the endpoint to the client, forcibly, on the progress thread: its transport connections go with it.
     * Once: later calls, and a check of its lanes queued behind, find it closed.
     */
    private void closeEndpoint() {
        dataPathCut.set(true);
        UcpEndpoint ep = endpoint;
        if (ep == null) {
            return;
        }
        listener.loop.execute(() -> {
            if (endpointClosed) {
                return;
            }
            endpointClosed = true;
            try {
                ep.closeNonBlockingForce();
            } catch (RuntimeException e) {
                log.debug("closing the UCX endpoint to {} failed: {}", peer, e.toString());
            }
        });
    }

    /**
     * Finds, once, whether the NIC checks the keys this client uses: the lanes UCX chose for this memserver's endpoint
     * to it, which UCX pairs with the client's own and selects from the same transports ({@link UcxKeyCheck#endpoint}).
     * Called before the client's first MAP is answered, when its wire-up is over.
     */
    private void checkKeys() {
        if (keys != null) {
            return;
        }
        UcpEndpoint ep = endpoint;
        KeyEnforcement k;
        if (ep == null) {
            k = new KeyEnforcement(false, "the client made no UCX_CONNECT endpoint for the memserver to inspect");
        } else {
            try {
                k = listener.loop.call(() -> endpointClosed ? new KeyEnforcement(false, "its endpoint is closed")
                        : UcxKeyCheck.endpoint(UcxInfo.endpointInfo(ep)), listener.helloTimeoutMillis());
            } catch (Exception e) {
                k = new KeyEnforcement(false, "UCX's description of the endpoint could not be read ("
                        + e.getMessage() + ")");
            }
        }
        keys = k;
        if (!k.enforced() && listener.contextKeys().enforced()) {
            listener.unenforced(this, peer, k);
        }
    }

    /** READ and WRITE are UCX GET and PUT on this transport, never control messages. */
    private static Message.Error notHere(Message request) {
        return ControlDispatcher.error(request, Status.BAD_REQUEST, (request instanceof Message.Read ? "READ"
                : "WRITE") + " does not travel on this memserver's control connection: it serves the ucx transport "
                + "(data moves as UCX GET/PUT); connect with --transport ucx");
    }

    private void map(RegionService.Session s, Message.MapRegion r) throws IOException {
        checkKeys();
        // Under the write lock, so an INVALIDATE of this registration cannot overtake the reply.
        synchronized (writeLock) {
            UcxListener.Registration reg;
            try {
                reg = listener.map(this, s, r.regionId(), r.key(), r.length());
            } catch (RemoteMemoryException e) {
                send(ControlDispatcher.error(r, e.status(), e.getMessage()));
                return;
            }
            send(new Message.MapReply(r.id(), reg.address, r.length(), WireBytes.copyOf(reg.rkey)));
        }
    }

    /** Tells the client to forget these regions' keys; completes true when it answered, false when it was cut off. */
    CompletableFuture<Boolean> invalidate(List<Long> regions) {
        long id = pushIds.incrementAndGet();
        CompletableFuture<Boolean> f = new CompletableFuture<>();
        pushes.put(id, f);
        if (!channel.isOpen()) {
            pushes.remove(id);
            f.complete(false);
            return f;
        }
        Message.Invalidate push = new Message.Invalidate(id, regions);
        Thread.ofVirtual().name("rdma-ucx-push-" + peer).start(() -> {
            if (!trySend(push)) {
                pushes.remove(id);
                f.complete(false);
            }
        });
        long timeout = listener.helloTimeoutMillis();
        UcxListener.TIMER.schedule(() -> {
            if (pushes.remove(id) != null) {
                log.warn("client {} did not forget the keys of region(s) {} within {} ms; disconnected", peer,
                        regions, timeout);
                close();
                f.complete(false);
            }
        }, timeout, TimeUnit.MILLISECONDS);
        return f;
    }

    /**
     * In pieces under the write lock: the reply's size decides no allocation (nor a cached direct buffer of the JDK's
     * that large for this thread). The listing keeps one of the memserver's few listing places until it is written; a
     * client that does not read it within the hello timeout is cut off, which gives the place back.
     */
    private void list(RegionService.Session s, Message.ListRegions l) throws IOException {
        ControlDispatcher.Listed listed = ControlDispatcher.list(s, l);
        if (listed.error() != null) {
            send(listed.error());
            return;
        }
        try (RegionService.Listing listing = listed.listing()) {
            List<RegionInfo> regions = listing.regions();
            long timeout = listener.helloTimeoutMillis();
            ScheduledFuture<?> deadline = UcxListener.TIMER.schedule(() -> {
                limited.info("listing_timeout", "client {} did not read its region listing within {} ms; "
                        + "disconnected", peer, timeout);
                close();
            }, timeout, TimeUnit.MILLISECONDS);
            try {
                synchronized (writeLock) {
                    ByteBuffer chunk = ByteBuffer.allocate(LIST_CHUNK).order(ByteOrder.LITTLE_ENDIAN);
                    MessageEncoder.listReplyStart(chunk, l.id(), regions.size(), listed.bodyLength());
                    for (RegionInfo r : regions) {
                        if (chunk.remaining() < MessageEncoder.listEntrySize(r)) {
                            writeFully(chunk.flip());
                            chunk.clear();
                        }
                        MessageEncoder.listEntry(chunk, r);
                    }
                    writeFully(chunk.flip());
                    stats.sendMessages.increment();
                    stats.sendBytes.add(Protocol.HEADER + (long) listed.bodyLength());
                }
            } finally {
                deadline.cancel(false);
            }
        }
    }

    private void send(Message m) throws IOException {
        ByteBuffer b = MessageEncoder.encode(m);
        synchronized (writeLock) {
            stats.sendMessages.increment();
            stats.sendBytes.add(b.remaining());
            writeFully(b);
        }
    }

    /** Sends from a thread of its own: the caller serves someone else and must not wait on this client's reading. */
    private void sendLater(Message m) {
        Thread.ofVirtual().name("rdma-ucx-send-" + peer).start(() -> trySend(m));
    }

    private boolean trySend(Message m) {
        try {
            send(m);
            return true;
        } catch (IOException e) {
            log.debug("could not send to {}: {}", peer, e.getMessage());
            return false;
        }
    }

    private void writeFully(ByteBuffer b) throws IOException {
        Link l = link;
        if (l == null) {
            throw new java.nio.channels.ClosedChannelException(); // nothing goes out before the link is set up
        }
        while (b.hasRemaining()) {
            l.write(b);
        }
    }
}
