package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.ConnectionGate;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.Lease;
import dev.rbridge.common.RateLimitedLog;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ServerInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The memserver end of one ucx-provider control connection, on its own thread: HELLO, the region and lease operations,
 * ZERO (the memserver fills the range: registered memory must not be given back with madvise while a NIC may hold
 * its pages), UCX_CONNECT and MAP. Replies that wait for other clients to forget a key (RELEASE, a LEASE that rotated
 * a volume's keys) are sent when they have, without holding up this connection's other requests.
 *
 * <p>Whatever another connection's thread (or the timer) has to send to this client, a deferred reply or an
 * INVALIDATE, goes out on a virtual thread of its own: a client that stops reading blocks its own sends only, never a
 * thread that serves someone else.
 */
final class UcxServerConnection implements Runnable {
    private static final Logger log = LoggerFactory.getLogger(UcxServerConnection.class);
    private static final RateLimitedLog limited = new RateLimitedLog(log);
    private static final int MAX_CONTROL_BODY = 64 << 10;
    /** As the tcp provider's: a token and a client name. */
    private static final int MAX_HELLO_BODY = 4 << 10;
    /** LIST replies go out in pieces of about this size, so no reply's size decides an allocation. */
    private static final int LIST_CHUNK = 64 << 10;

    private final UcxListener listener;
    private final SocketChannel channel;
    private final java.net.InetSocketAddress remote;
    private final ConnectionGate.Slot slot;
    private volatile boolean admitted;
    private volatile java.util.concurrent.Future<?> helloGuard;
    private final String peer;
    private final ConnectionStats stats = new ConnectionStats();
    private final Object writeLock = new Object();
    private final AtomicLong pushIds = new AtomicLong();
    private final Map<Long, CompletableFuture<Boolean>> pushes = new ConcurrentHashMap<>();
    private volatile RegionService.Session session;

    UcxServerConnection(UcxListener listener, SocketChannel channel, java.net.InetSocketAddress remote,
                        ConnectionGate.Slot slot) {
        this.listener = listener;
        this.channel = channel;
        this.remote = remote;
        this.slot = slot;
        this.peer = remote.getAddress().getHostAddress() + ":" + remote.getPort();
    }

    String peer() {
        return peer;
    }

    /** The hello guard scheduled for this connection: cancelled when it ends, so the timer lets go of it. */
    void guard(java.util.concurrent.Future<?> guard) {
        this.helloGuard = guard;
        if (!channel.isOpen()) {
            guard.cancel(false);
        }
    }

    void helloDeadline() {
        if (!admitted && channel.isOpen()) {
            limited.info("hello_timeout", "client {} did not say hello in time; disconnected", peer);
            listener.service.refused("hello_timeout", remote);
            close();
        }
    }

    /** The listener could not start this connection's thread: undo what it did. */
    void abandon() {
        java.util.concurrent.Future<?> g = helloGuard;
        if (g != null) {
            g.cancel(false);
        }
        close();
        slot.close();
        listener.ended(this);
    }

    void close() {
        try {
            channel.close();
        } catch (IOException e) {
            log.debug("close failed", e);
        }
    }

    @Override
    public void run() {
        try {
            Control.tune(channel);
            if (hello()) {
                serve();
            }
        } catch (EOFException | ClosedChannelException e) {
            log.debug("client {} disconnected", peer);
        } catch (MalformedException e) {
            limited.warn("malformed", "client {} sent a malformed message ({}); closing its connection", peer,
                    e.getMessage());
            if (session == null) {
                listener.service.refused("malformed", remote);
            }
            trySend(Control.error(0, 0, Status.BAD_REQUEST.code(), "malformed message: " + e.getMessage()));
            discardInput();
        } catch (IOException e) {
            log.debug("client {}: {}", peer, e.getMessage());
        } catch (OutOfMemoryError e) {
            limited.error("no_memory", "client {}: out of memory serving it ({}); disconnected", peer, e.toString());
        } catch (RuntimeException e) {
            limited.error("internal", "client {}: internal error", peer, e);
        } finally {
            java.util.concurrent.Future<?> g = helloGuard;
            if (g != null) {
                g.cancel(false);
            }
            slot.close();
            close();
            pushes.values().forEach(f -> f.complete(false));
            listener.ended(this);
            RegionService.Session s = session;
            if (s != null) {
                s.closed();
            }
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

    private static final class MalformedException extends Exception {
        MalformedException(String message) {
            super(message);
        }
    }

    private Control.Header header() throws IOException, MalformedException {
        Control.Header h = Control.readHeader(channel);
        if (h.magic() != Control.MAGIC) {
            throw new MalformedException("bad magic 0x" + Integer.toHexString(h.magic()));
        }
        if (h.length() < 0 || h.length() > Control.MAX_BODY) {
            throw new MalformedException("body length " + Integer.toUnsignedString(h.length()));
        }
        return h;
    }

    private boolean hello() throws IOException, MalformedException {
        Control.Header h = header();
        if (h.opcode() != Control.HELLO) {
            throw new MalformedException("expected HELLO first, got " + Control.opName(h.opcode()));
        }
        if (h.length() > MAX_HELLO_BODY) {
            throw new MalformedException("HELLO of " + h.length() + " bytes (at most " + MAX_HELLO_BODY + ")");
        }
        ByteBuffer body = Control.readBody(channel, h.length());
        if (h.version() != Control.VERSION) {
            limited.warn("version", "client {} speaks protocol v{}, this memserver v{}; refused", peer, h.version(),
                    Control.VERSION);
            listener.service.refused("version", remote);
            trySend(Control.error(h.opcode(), h.id(), Status.VERSION_MISMATCH.code(), "this memserver speaks protocol v"
                    + Control.VERSION + ", the client v" + h.version() + "; upgrade the older side"));
            return false;
        }
        String token;
        String name;
        try {
            token = Control.getString(body);
            name = Control.getString(body);
        } catch (BufferUnderflowException e) {
            throw new MalformedException("HELLO body is truncated");
        }
        RegionService.Session s;
        try {
            s = listener.service.open(token, name, remote);
        } catch (RemoteMemoryException e) {
            trySend(Control.error(h.opcode(), h.id(), e.status().code(), e.getMessage()));
            return false;
        }
        admitted = true;
        session = s;
        if (!slot.authenticated()) {
            return false; // cut off to make room for another peer while its greeting was checked
        }
        s.attach(stats, this::close);
        send(info(h.opcode(), h.id(), s.serverInfo()));
        return true;
    }

    private static ByteBuffer info(int opcode, long id, ServerInfo info) {
        ByteBuffer b = Control.message(opcode, id, 0, Control.stringLength(info.serverId()) + 16);
        Control.putString(b, info.serverId());
        b.putLong(info.capacityBytes()).putLong(info.freeBytes());
        return Control.done(b);
    }

    private void serve() throws IOException, MalformedException {
        RegionService.Session s = session;
        while (true) {
            Control.Header h = header();
            if (h.version() != Control.VERSION) {
                throw new MalformedException("protocol version changed to " + h.version() + " mid-stream");
            }
            stats.recvMessages.increment();
            stats.recvBytes.add(Control.HEADER + (long) h.length());
            if (h.opcode() == Control.READ || h.opcode() == Control.WRITE) {
                skip(h.length());
                send(Control.error(h.opcode(), h.id(), Status.BAD_REQUEST.code(), Control.opName(h.opcode())
                        + " does not travel on this memserver's control connection: it serves the ucx transport "
                        + "(data moves as UCX GET/PUT); connect with --transport ucx"));
                continue;
            }
            if (h.length() > MAX_CONTROL_BODY) {
                throw new MalformedException(Control.opName(h.opcode()) + " of " + h.length() + " bytes");
            }
            ByteBuffer body = Control.readBody(channel, h.length());
            if (h.opcode() == Control.INVALIDATE) { // a client's answer to our INVALIDATE
                CompletableFuture<Boolean> f = pushes.remove(h.id());
                if (f != null) {
                    f.complete(true);
                }
                continue;
            }
            try {
                handle(s, h, body);
            } catch (RemoteMemoryException e) {
                send(Control.error(h.opcode(), h.id(), e.status().code(), e.getMessage()));
            } catch (BufferUnderflowException | IllegalArgumentException e) {
                send(Control.error(h.opcode(), h.id(), Status.BAD_REQUEST.code(), Control.opName(h.opcode())
                        + " body is malformed"));
            }
        }
    }

    private void handle(RegionService.Session s, Control.Header h, ByteBuffer body)
            throws IOException, RemoteMemoryException {
        int op = h.opcode();
        long id = h.id();
        switch (op) {
            case Control.ALLOCATE -> {
                long length = body.getLong();
                send(descriptor(op, id, s.allocate(Control.getTag(body), length)));
            }
            case Control.OPEN -> send(descriptor(op, id, s.open(body.getLong())));
            case Control.LIST -> list(s, op, id);
            case Control.RELEASE -> {
                long region = body.getLong();
                s.release(region, body.getLong());
                // Every client that holds the region's remote key forgets it before the memory may go.
                listener.invalidate(List.of(region)).whenComplete((v, e) -> sendLater(empty(op, id)));
            }
            case Control.RETAG -> {
                long region = body.getLong();
                long key = body.getLong();
                send(descriptor(op, id, s.retag(region, key, Control.getTag(body))));
            }
            case Control.LEASE -> {
                String volume = Control.getString(body);
                String owner = Control.getString(body);
                Lease lease = s.lease(volume, owner, body.getLong());
                ByteBuffer reply = Control.message(op, id, 0, 9);
                reply.putLong(lease.ttlMillis()).put((byte) (lease.tookOver() ? 1 : 0));
                ByteBuffer done = Control.done(reply);
                // Fencing: a grant other than a renewal rotated the keys; every client forgets the remote keys of
                // the volume's regions whose registration no longer matches a key, and their memory is registered
                // afresh (new remote keys) when the new holder maps it.
                List<Long> stale = listener.staleRegistrations(s, volume);
                if (stale.isEmpty()) {
                    send(done);
                    return;
                }
                listener.invalidate(stale).whenComplete((v, e) -> sendLater(done));
            }
            case Control.UNLEASE -> {
                String volume = Control.getString(body);
                s.unlease(volume, Control.getString(body));
                send(empty(op, id));
            }
            case Control.INFO -> send(info(op, id, s.serverInfo()));
            case Control.ZERO -> {
                long region = body.getLong();
                long key = body.getLong();
                long offset = body.getLong();
                long length = body.getLong();
                try (RegionService.Pin p = s.pin(region, key, offset, length)) {
                    p.memory().fill((byte) 0);
                }
                send(empty(op, id));
            }
            case Control.FLUSH -> send(empty(op, id)); // data operations are flushed on the UCX endpoint
            case Control.UCX_CONNECT -> {
                ByteBuffer reply = Control.message(op, id, 0, 4 + listener.workerAddress.remaining());
                Control.putBytes(reply, listener.workerAddress);
                send(Control.done(reply));
            }
            case Control.MAP -> {
                long region = body.getLong();
                long key = body.getLong();
                long length = body.getLong();
                // Under the write lock, so an INVALIDATE of this registration cannot overtake the reply.
                synchronized (writeLock) {
                    UcxListener.Registration r = listener.map(this, s, region, key, length);
                    ByteBuffer reply = Control.message(op, id, 0, 16 + 4 + r.rkey.remaining());
                    reply.putLong(r.address).putLong(length);
                    Control.putBytes(reply, r.rkey);
                    send(Control.done(reply));
                }
            }
            default -> send(Control.error(op, id, Status.BAD_REQUEST.code(), "unexpected " + Control.opName(op)));
        }
    }

    /** Tells the client to forget these regions' keys; completes true when it answered, false when it was cut off. */
    CompletableFuture<Boolean> invalidate(List<Long> regions) {
        long id = pushIds.incrementAndGet();
        CompletableFuture<Boolean> f = new CompletableFuture<>();
        pushes.put(id, f);
        ByteBuffer b = Control.message(Control.INVALIDATE, id, 0, 4 + 8 * regions.size());
        b.putInt(regions.size());
        regions.forEach(b::putLong);
        if (!channel.isOpen()) {
            pushes.remove(id);
            f.complete(false);
            return f;
        }
        ByteBuffer push = Control.done(b);
        Thread.ofVirtual().name("rdma-ucx-push-" + peer).start(() -> {
            if (!trySend(push)) {
                pushes.remove(id);
                f.complete(false);
            }
        });
        long timeout = listener.params.helloTimeout().toMillis();
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
    private void list(RegionService.Session s, int op, long id) throws IOException, RemoteMemoryException {
        try (RegionService.Listing listing = s.listing()) {
            List<RegionInfo> regions = listing.regions();
            long length = 4;
            for (RegionInfo r : regions) {
                length += Control.descriptorLength(r.descriptor()) + Control.stringLength(r.owner());
            }
            if (length > Control.MAX_BODY) {
                send(Control.error(op, id, Status.NO_CAPACITY.code(), regions.size() + " regions take " + length
                        + " bytes to list, more than one message holds (" + Control.MAX_BODY + ")"));
                return;
            }
            long timeout = listener.params.helloTimeout().toMillis();
            ScheduledFuture<?> deadline = UcxListener.TIMER.schedule(() -> {
                limited.info("listing_timeout", "client {} did not read its region listing within {} ms; "
                        + "disconnected", peer, timeout);
                close();
            }, timeout, TimeUnit.MILLISECONDS);
            try {
                synchronized (writeLock) {
                    ByteBuffer chunk = Control.message(op, id, 0, LIST_CHUNK);
                    chunk.putInt(20, (int) length);
                    chunk.putInt(regions.size());
                    for (RegionInfo r : regions) {
                        int n = Control.descriptorLength(r.descriptor()) + Control.stringLength(r.owner());
                        if (chunk.remaining() < n) {
                            Control.writeFully(channel, chunk.flip());
                            chunk.clear();
                        }
                        Control.putDescriptor(chunk, r.descriptor());
                        Control.putString(chunk, r.owner());
                    }
                    Control.writeFully(channel, chunk.flip());
                    stats.sendMessages.increment();
                    stats.sendBytes.add(Control.HEADER + length);
                }
            } finally {
                deadline.cancel(false);
            }
        }
    }

    private static ByteBuffer empty(int opcode, long id) {
        return Control.done(Control.message(opcode, id, 0, 0));
    }

    private static ByteBuffer descriptor(int opcode, long id, RegionDescriptor d) {
        ByteBuffer b = Control.message(opcode, id, 0, Control.descriptorLength(d));
        Control.putDescriptor(b, d);
        return Control.done(b);
    }

    private void send(ByteBuffer b) throws IOException {
        synchronized (writeLock) {
            stats.sendMessages.increment();
            stats.sendBytes.add(b.remaining());
            Control.writeFully(channel, b);
        }
    }

    /** Sends from a thread of its own: the caller serves someone else and must not wait on this client's reading. */
    private void sendLater(ByteBuffer b) {
        Thread.ofVirtual().name("rdma-ucx-send-" + peer).start(() -> trySend(b));
    }

    private boolean trySend(ByteBuffer b) {
        try {
            send(b);
            return true;
        } catch (IOException e) {
            log.debug("could not send to {}: {}", peer, e.getMessage());
            return false;
        }
    }

    private void skip(int n) throws IOException {
        ByteBuffer scratch = ByteBuffer.allocate(Math.min(n, 64 << 10));
        long left = n;
        while (left > 0) {
            scratch.clear().limit((int) Math.min(scratch.capacity(), left));
            int r = channel.read(scratch);
            if (r < 0) {
                throw new EOFException();
            }
            left -= r;
        }
    }
}
