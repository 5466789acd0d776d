package dev.rbridge.rdma.tcp;

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
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The memserver end of one tcp-provider connection, on its own thread. Requests are executed in arrival order; data
 * moves between the socket and region memory without an intermediate copy. Replies are queued and written together
 * when the input runs dry (or the queue grows large), so a pipelined burst costs one system call each way.
 *
 * <p>Until the client has authenticated, the connection holds {@value #HELLO_INPUT} bytes of input buffer and
 * {@value #HELLO_REPLIES} of reply buffer, on the heap, made by its own thread: a peer without the token costs a
 * thread and a few kilobytes until the hello timeout, never the large direct buffers an authenticated client gets. Every
 * reply, a LIST of many regions included, goes out through the fixed reply buffer, so what a client asks for never
 * decides an allocation; a client that does not read a LIST within the hello timeout is cut off, so the listing it
 * holds in memory is not held for long.
 *
 * <p>An error in one request (bad key, out of range, no capacity) is answered and the connection goes on; a message
 * that cannot be framed (bad magic, impossible length) closes this connection only.
 */
final class TcpServerConnection implements Runnable {
    private static final Logger log = LoggerFactory.getLogger(TcpServerConnection.class);
    /** What peers can make this class log (malformed greetings, timeouts) is logged at most once per reason often. */
    private static final RateLimitedLog limited = new RateLimitedLog(log);
    private static final int MAX_CONTROL_BODY = 64 << 10;
    /** A HELLO carries a token and a client name: a few hundred bytes; this leaves room for long tokens. */
    static final int MAX_HELLO_BODY = 4 << 10;
    /** Input buffer before authentication: a whole HELLO, and what an eager client pipelines behind it. */
    static final int HELLO_INPUT = 8 << 10;
    /** Reply buffer before authentication: the HELLO reply, or an error of at most {@value #MAX_ERROR_CHARS} chars. */
    static final int HELLO_REPLIES = 4 << 10;
    /** Input and reply buffers once authenticated: room for pipelined bursts of small requests and their replies. */
    static final int BUFFER = 256 << 10;
    /** Error messages are cut to this: they quote names and numbers, never anything long. */
    static final int MAX_ERROR_CHARS = 1000;
    private static final int FLUSH_AT_BYTES = 4 << 20;

    private final SocketChannel channel;
    private final java.net.InetSocketAddress remote;
    private final RegionService service;
    private final ConnectionGate.Slot slot;
    /** Where the buffers of an authenticated client come from and go back to. */
    private final BufferPool buffers;
    /** TCP congestion control, set once the client has authenticated. */
    private final String congestion;
    private final Consumer<TcpServerConnection> onEnd;
    private final String peer;
    private final ConnectionStats stats = new ConnectionStats();
    /** Made by this connection's thread (see the class comment), larger once the client has authenticated. */
    private ByteBuffer in;
    private ByteBuffer replyArea;
    private final List<ByteBuffer> replies = new ArrayList<>();
    /** What READ replies send for region memory never written; shared and read-only. */
    private static final ByteBuffer ZEROES = ByteBuffer.allocateDirect(256 << 10).asReadOnlyBuffer();
    private final List<RegionService.Pin> pins = new ArrayList<>();
    /** The last request carried large WRITE data: read only the next header and address, so that its data skips in. */
    private boolean afterLarge;
    /** Polls briefly before this thread blocks for input; made on first use. */
    private Spinner spinner;
    private long queuedBytes;
    private volatile RegionService.Session session;
    /** The token was accepted: the hello guard no longer applies. */
    private volatile boolean admitted;
    private volatile Future<?> helloGuard;
    private long helloTimeoutMillis;

    TcpServerConnection(SocketChannel channel, java.net.InetSocketAddress remote, RegionService service,
                        ConnectionGate.Slot slot, BufferPool buffers, String congestion,
                        Consumer<TcpServerConnection> onEnd) {
        this.channel = channel;
        this.buffers = buffers;
        this.congestion = congestion;
        this.remote = remote;
        this.service = service;
        this.slot = slot;
        this.onEnd = onEnd;
        this.peer = remote.getAddress().getHostAddress() + ":" + remote.getPort();
    }

    String peer() {
        return peer;
    }

    /** The hello guard scheduled for this connection: cancelled when it ends, so the timer lets go of it. */
    void guard(Future<?> guard, long timeoutMillis) {
        this.helloTimeoutMillis = timeoutMillis;
        this.helloGuard = guard;
        if (!channel.isOpen()) {
            guard.cancel(false);
        }
    }

    void helloDeadline() {
        if (!admitted && channel.isOpen()) {
            limited.info("hello_timeout", "client {} did not say hello within {} ms; disconnected", peer,
                    helloTimeoutMillis);
            service.refused("hello_timeout", remote);
            close();
        }
    }

    void close() {
        TcpConnection.closeQuietly(channel);
    }

    /** The listener could not start this connection's thread: undo what it did. */
    void abandon() {
        Future<?> g = helloGuard;
        if (g != null) {
            g.cancel(false);
        }
        close();
        slot.close();
        onEnd.accept(this);
    }

    @Override
    public void run() {
        try {
            // On the heap: the JDK reads and writes heap buffers through a direct buffer of this thread's, freed
            // when the thread ends, so a flood of short-lived connections leaves no direct memory for the GC to find.
            ByteBuffer hello = ByteBuffer.allocate(HELLO_INPUT + HELLO_REPLIES);
            in = hello.slice(0, HELLO_INPUT).order(ByteOrder.LITTLE_ENDIAN).flip();
            replyArea = hello.slice(HELLO_INPUT, HELLO_REPLIES).order(ByteOrder.LITTLE_ENDIAN);
            if (hello()) {
                serve();
            }
        } catch (EOFException | ClosedChannelException e) {
            log.debug("client {} disconnected", peer);
        } catch (Wire.MalformedMessageException e) {
            limited.warn("malformed", "client {} sent a malformed message ({}); closing its connection", peer,
                    e.getMessage());
            if (session == null) {
                service.refused("malformed", remote);
            }
            tryError(0, 0, Status.BAD_REQUEST, "malformed message: " + e.getMessage());
        } catch (IOException e) {
            log.debug("client {}: {}", peer, e.getMessage());
        } catch (OutOfMemoryError e) {
            // Only this connection's own buffers are made here; the memserver goes on without it.
            limited.error("no_memory", "client {}: no memory for its buffers ({}); disconnected", peer, e.toString());
            if (session == null) {
                service.refused("no_memory", remote);
            }
        } catch (RuntimeException e) {
            limited.error("internal", "client {}: internal error", peer, e);
        } finally {
            Future<?> g = helloGuard;
            if (g != null) {
                g.cancel(false);
            }
            releasePins();
            close();
            slot.close();
            replies.clear();
            if (in != null && in.isDirect()) {
                buffers.give(in);
                buffers.give(replyArea);
            }
            in = null;
            replyArea = null;
            RegionService.Session s = session;
            if (s != null) {
                s.closed();
            }
            onEnd.accept(this);
        }
    }

    // ----------------------------------------------------------------------------------------------- hello

    private boolean hello() throws IOException, Wire.MalformedMessageException {
        Header h = header();
        if (h.opcode != Wire.HELLO) {
            throw new Wire.MalformedMessageException("expected HELLO first, got " + Wire.opName(h.opcode));
        }
        if (h.length > MAX_HELLO_BODY) {
            throw new Wire.MalformedMessageException("HELLO of " + h.length + " bytes (at most " + MAX_HELLO_BODY
                    + ")");
        }
        ensure(h.length);
        ByteBuffer body = take(h.length);
        if (h.version != Wire.VERSION) {
            limited.warn("version", "client {} speaks protocol v{}, this memserver v{}; refused", peer, h.version,
                    Wire.VERSION);
            service.refused("version", remote);
            tryError(h.id, h.opcode, Status.VERSION_MISMATCH, "this memserver speaks protocol v" + Wire.VERSION
                    + ", the client v" + h.version + "; upgrade the older side");
            return false;
        }
        String token = Wire.parse("HELLO", () -> Wire.getString(body));
        String name = Wire.parse("HELLO", () -> Wire.getString(body));
        RegionService.Session s;
        try {
            s = service.open(token, name, remote);
        } catch (RemoteMemoryException e) {
            tryError(h.id, h.opcode, e.status(), e.getMessage());
            return false;
        }
        admitted = true;
        session = s; // from here on, however this ends, the session hears of it
        if (!slot.authenticated()) {
            return false; // cut off to make room for another peer while its greeting was checked
        }
        try {
            grow();
        } catch (OutOfMemoryError e) {
            limited.error("no_memory", "client {}: no memory for its buffers ({}); disconnected", peer,
                    e.toString());
            service.refused("no_memory", remote);
            tryError(h.id, h.opcode, Status.NO_CAPACITY, "the memserver has no memory for another connection now; "
                    + "try again later");
            return false;
        }
        Wire.tune(channel);
        TcpCongestion.apply(channel, congestion);
        s.attach(stats, this::close);
        ServerInfo info = s.serverInfo();
        ByteBuffer reply = queueReply(Wire.HELLO, h.id, Wire.stringLength(info.serverId()) + 16);
        Wire.putString(reply, info.serverId());
        reply.putLong(info.capacityBytes()).putLong(info.freeBytes());
        flushReplies();
        return true;
    }

    /** The buffers of an authenticated client; what it pipelined behind its HELLO moves along. */
    private void grow() {
        ByteBuffer bigIn = buffers.take();
        ByteBuffer bigReplies;
        try {
            bigReplies = buffers.take();
        } catch (OutOfMemoryError e) {
            buffers.give(bigIn);
            throw e;
        }
        bigIn.put(in).flip();
        in = bigIn;
        replyArea = bigReplies;
    }

    // ------------------------------------------------------------------------------------------------ serve

    private void serve() throws IOException, Wire.MalformedMessageException {
        RegionService.Session s = session;
        while (true) {
            Header h = header();
            if (h.version != Wire.VERSION) {
                throw new Wire.MalformedMessageException("protocol version changed to " + h.version + " mid-stream");
            }
            stats.recvMessages.increment();
            if (h.opcode != Wire.WRITE) {
                afterLarge = false;
            }
            stats.recvBytes.add(Wire.HEADER + (long) h.length);
            switch (h.opcode) {
                case Wire.WRITE -> write(s, h);
                case Wire.READ -> read(s, h);
                case Wire.ZERO -> {
                    ByteBuffer b = fixedBody(h, Wire.DATA_ADDRESS + 8);
                    if (b != null) {
                        try {
                            s.zero(b.getLong(), b.getLong(), b.getLong(), b.getLong());
                            queueReply(h.opcode, h.id, 0);
                        } catch (RemoteMemoryException e) {
                            queueError(h, e.status(), e.getMessage());
                        }
                    }
                }
                case Wire.FLUSH -> {
                    if (fixedBody(h, 0) != null) {
                        queueReply(h.opcode, h.id, 0);
                    }
                }
                case Wire.ALLOCATE, Wire.OPEN, Wire.LIST, Wire.RELEASE, Wire.RETAG, Wire.LEASE, Wire.UNLEASE,
                     Wire.INFO -> control(s, h);
                default -> {
                    skip(h.length);
                    queueError(h, Status.BAD_REQUEST, "unexpected " + Wire.opName(h.opcode));
                }
            }
            if (queuedBytes >= FLUSH_AT_BYTES) {
                flushReplies();
            }
        }
    }

    private void write(RegionService.Session s, Header h) throws IOException, Wire.MalformedMessageException {
        if (h.length < Wire.DATA_ADDRESS) {
            throw new Wire.MalformedMessageException("WRITE of " + h.length + " bytes has no room for its address");
        }
        ensure(Wire.DATA_ADDRESS);
        long region = in.getLong();
        long key = in.getLong();
        long offset = in.getLong();
        int length = h.length - Wire.DATA_ADDRESS;
        RegionService.Pin pin;
        try {
            pin = s.pin(region, key, offset, length);
        } catch (RemoteMemoryException e) {
            skip(length);
            queueError(h, e.status(), e.getMessage());
            return;
        }
        try (pin) {
            ByteBuffer dst = pin.memory().asByteBuffer();
            int buffered = Math.min(in.remaining(), length);
            dst.put(in.slice(in.position(), buffered));
            in.position(in.position() + buffered);
            while (dst.hasRemaining()) {
                if (channel.read(dst) < 0) {
                    throw new EOFException();
                }
            }
            pin.wrote();
        }
        afterLarge = length >= Wire.LARGE;
        stats.writeOps.increment();
        stats.writeBytes.add(length);
        queueReply(h.opcode, h.id, 0);
    }

    private void read(RegionService.Session s, Header h) throws IOException, Wire.MalformedMessageException {
        ByteBuffer b = fixedBody(h, Wire.DATA_ADDRESS + 4);
        if (b == null) {
            return;
        }
        long region = b.getLong();
        long key = b.getLong();
        long offset = b.getLong();
        int length = b.getInt();
        if (length < 0 || length > Wire.MAX_DATA) {
            queueError(h, Status.BAD_REQUEST, "READ of " + Integer.toUnsignedString(length) + " bytes exceeds "
                    + Wire.MAX_DATA);
            return;
        }
        RegionService.Pin pin;
        try {
            pin = s.pin(region, key, offset, length);
        } catch (RemoteMemoryException e) {
            queueError(h, e.status(), e.getMessage());
            return;
        }
        pins.add(pin); // held until the reply data is on the wire
        queueReply(h.opcode, h.id, 0, length);
        pin.runs((at, n, written) -> {
            if (written) {
                replies.add(pin.memory().asSlice(at, n).asByteBuffer());
            } else { // never written: zeroes from a shared buffer, so that no page of the region gets backed
                for (long done = 0; done < n; ) {
                    int chunk = (int) Math.min(n - done, ZEROES.capacity());
                    replies.add(ZEROES.duplicate().limit(chunk));
                    done += chunk;
                }
            }
        });
        queuedBytes += length;
        stats.readOps.increment();
        stats.readBytes.add(length);
    }

    private void control(RegionService.Session s, Header h) throws IOException, Wire.MalformedMessageException {
        if (h.length > MAX_CONTROL_BODY) {
            throw new Wire.MalformedMessageException(Wire.opName(h.opcode) + " of " + h.length + " bytes");
        }
        ensure(h.length);
        ByteBuffer body = take(h.length);
        try {
            switch (h.opcode) {
                case Wire.ALLOCATE -> {
                    long length = body.getLong();
                    RegionDescriptor d = s.allocate(Wire.getTag(body), length);
                    Wire.putDescriptor(queueReply(h.opcode, h.id, Wire.descriptorLength(d)), d);
                }
                case Wire.OPEN -> {
                    RegionDescriptor d = s.open(body.getLong());
                    Wire.putDescriptor(queueReply(h.opcode, h.id, Wire.descriptorLength(d)), d);
                }
                case Wire.LIST -> list(s, h);
                case Wire.RELEASE -> {
                    s.release(body.getLong(), body.getLong());
                    queueReply(h.opcode, h.id, 0);
                }
                case Wire.RETAG -> {
                    long region = body.getLong();
                    long key = body.getLong();
                    RegionDescriptor d = s.retag(region, key, Wire.getTag(body));
                    Wire.putDescriptor(queueReply(h.opcode, h.id, Wire.descriptorLength(d)), d);
                }
                case Wire.LEASE -> {
                    String volume = Wire.getString(body);
                    String owner = Wire.getString(body);
                    Lease lease = s.lease(volume, owner, body.getLong());
                    queueReply(h.opcode, h.id, 9).putLong(lease.ttlMillis()).put((byte) (lease.tookOver() ? 1 : 0));
                }
                case Wire.UNLEASE -> {
                    String volume = Wire.getString(body);
                    s.unlease(volume, Wire.getString(body));
                    queueReply(h.opcode, h.id, 0);
                }
                case Wire.INFO -> {
                    ServerInfo info = s.serverInfo();
                    ByteBuffer reply = queueReply(h.opcode, h.id, Wire.stringLength(info.serverId()) + 16);
                    Wire.putString(reply, info.serverId());
                    reply.putLong(info.capacityBytes()).putLong(info.freeBytes());
                }
                default -> throw new IllegalStateException();
            }
        } catch (RemoteMemoryException e) {
            queueError(h, e.status(), e.getMessage());
        } catch (java.nio.BufferUnderflowException | Wire.MalformedMessageException e) {
            queueError(h, Status.BAD_REQUEST, Wire.opName(h.opcode) + " body is malformed");
        }
    }

    /**
     * Entry by entry through the reply buffer, flushed as it fills: however many regions there are, listing them
     * allocates nothing for the reply. The listing keeps one of the memserver's few listing places until its last
     * entry is in the reply buffer; a client that does not read for the hello timeout meanwhile is cut off, which
     * gives the place back (otherwise a few clients that never read would keep every other client from listing).
     */
    private void list(RegionService.Session s, Header h) throws IOException, RemoteMemoryException {
        try (RegionService.Listing listing = s.listing()) {
            List<RegionInfo> regions = listing.regions();
            long length = 4;
            for (RegionInfo r : regions) {
                length += Wire.descriptorLength(r.descriptor()) + Wire.stringLength(r.owner());
            }
            if (length > Wire.MAX_BODY) {
                queueError(h, Status.NO_CAPACITY, regions.size() + " regions take " + length
                        + " bytes to list, more than one message holds (" + Wire.MAX_BODY + ")");
                return;
            }
            Future<?> deadline = TcpProvider.TIMER.schedule(this::listingDeadline, helloTimeoutMillis,
                    TimeUnit.MILLISECONDS);
            try {
                queueReply(h.opcode, h.id, 4, (int) length).putInt(regions.size());
                for (RegionInfo r : regions) {
                    ByteBuffer entry = queueSlot(Wire.descriptorLength(r.descriptor())
                            + Wire.stringLength(r.owner()));
                    Wire.putDescriptor(entry, r.descriptor());
                    Wire.putString(entry, r.owner());
                }
            } finally {
                deadline.cancel(false);
            }
        }
    }

    private void listingDeadline() {
        limited.info("listing_timeout", "client {} did not read its region listing within {} ms; disconnected",
                peer, helloTimeoutMillis);
        close();
    }

    /** The body of a fixed-size request, or null (after answering BAD_REQUEST) when its length is wrong. */
    private ByteBuffer fixedBody(Header h, int expected) throws IOException {
        if (h.length != expected) {
            skip(h.length);
            queueError(h, Status.BAD_REQUEST, Wire.opName(h.opcode) + " body must be " + expected + " bytes, was "
                    + h.length);
            return null;
        }
        ensure(expected);
        return take(expected);
    }

    // ------------------------------------------------------------------------------------------ input helpers

    private record Header(int version, int opcode, long id, int length) {
    }

    private Header header() throws IOException, Wire.MalformedMessageException {
        ensure(Wire.HEADER);
        int magic = in.getInt();
        if (magic != Wire.MAGIC) {
            throw new Wire.MalformedMessageException("bad magic 0x" + Integer.toHexString(magic));
        }
        int version = Short.toUnsignedInt(in.getShort());
        int opcode = Short.toUnsignedInt(in.getShort());
        long id = in.getLong();
        in.getInt(); // status: unused in requests
        int length = in.getInt();
        if (length < 0 || length > Wire.MAX_BODY) {
            throw new Wire.MalformedMessageException("body length " + Integer.toUnsignedString(length)
                    + " exceeds " + Wire.MAX_BODY);
        }
        return new Header(version, opcode, id, length);
    }

    /** Makes at least {@code n} bytes readable in {@code in}; before blocking for input, sends queued replies. */
    private void ensure(int n) throws IOException {
        while (in.remaining() < n) {
            flushReplies();
            if (spinner == null) {
                spinner = new Spinner(channel.socket().getInputStream(), null);
            }
            spinner.await();
            Wire.readMore(channel, in, afterLarge ? Math.max(n, Wire.HEADER + Wire.DATA_ADDRESS) : Integer.MAX_VALUE);
        }
    }

    private ByteBuffer take(int n) {
        ByteBuffer b = in.slice(in.position(), n).order(ByteOrder.LITTLE_ENDIAN);
        in.position(in.position() + n);
        return b;
    }

    /** Reads past {@code n} bytes of input (a refused WRITE's data), through the input buffer. */
    private void skip(long n) throws IOException {
        int buffered = (int) Math.min(in.remaining(), n);
        in.position(in.position() + buffered);
        long left = n - buffered;
        if (left == 0) {
            return;
        }
        // Everything buffered is consumed: the input buffer is free to read the rest into and drop it.
        while (left > 0) {
            in.clear().limit((int) Math.min(in.capacity(), left));
            int r = channel.read(in);
            if (r < 0) {
                throw new EOFException();
            }
            left -= r;
        }
        in.position(0).limit(0);
    }

    // ------------------------------------------------------------------------------------------------ replies

    /** Queues a reply whose whole body the caller puts into the returned buffer. */
    private ByteBuffer queueReply(int opcode, long id, int bodyLength) throws IOException {
        return queueReply(opcode, id, bodyLength, bodyLength);
    }

    /**
     * Queues a reply header announcing {@code length} body bytes, of which the first {@code inline} the caller puts
     * into the returned buffer (the rest, READ data or LIST entries, is queued after it).
     */
    private ByteBuffer queueReply(int opcode, long id, int inline, int length) throws IOException {
        ByteBuffer slot = queueSlot(Wire.HEADER + inline);
        Wire.header(slot, opcode, id, 0, length);
        stats.sendMessages.increment();
        stats.sendBytes.add(Wire.HEADER + (long) length);
        return slot;
    }

    /**
     * The next {@code size} bytes of output, in the reply buffer (sent first if it has no room), for the caller to
     * fill. Every caller's size is bounded well below the buffer's.
     */
    private ByteBuffer queueSlot(int size) throws IOException {
        if (replyArea.remaining() < size) {
            flushReplies();
        }
        if (replyArea.remaining() < size) {
            throw new IllegalStateException("a reply part of " + size + " bytes exceeds the reply buffer ("
                    + replyArea.capacity() + ")");
        }
        int start = replyArea.position();
        ByteBuffer slot = replyArea.slice(start, size).order(ByteOrder.LITTLE_ENDIAN);
        replyArea.position(start + size);
        replies.add(slot.duplicate());
        queuedBytes += size;
        return slot;
    }

    private void queueError(Header h, Status status, String message) throws IOException {
        String m = message.length() > MAX_ERROR_CHARS ? message.substring(0, MAX_ERROR_CHARS) + "..." : message;
        int bodyLength = Wire.stringLength(m);
        ByteBuffer slot = queueSlot(Wire.HEADER + bodyLength);
        Wire.header(slot, h.opcode, h.id, status.code(), bodyLength);
        Wire.putString(slot, m);
    }

    /** Best effort: tell a client why it is being disconnected. */
    private void tryError(long id, int opcode, Status status, String message) {
        try {
            queueError(new Header(Wire.VERSION, opcode, id, 0), status, message);
            flushReplies();
        } catch (IOException e) {
            log.debug("could not tell {} why: {}", peer, e.getMessage());
        }
    }

    private void flushReplies() throws IOException {
        if (replies.isEmpty()) {
            return;
        }
        try {
            ByteBuffer[] vector = replies.toArray(ByteBuffer[]::new);
            int first = 0;
            while (first < vector.length) {
                channel.write(vector, first, vector.length - first);
                while (first < vector.length && !vector[first].hasRemaining()) {
                    first++;
                }
            }
        } finally {
            replies.clear();
            replyArea.clear();
            queuedBytes = 0;
            releasePins();
        }
    }

    private void releasePins() {
        for (RegionService.Pin p : pins) {
            p.close();
        }
        pins.clear();
    }
}
