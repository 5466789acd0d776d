package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.Lease;
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
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

/**
 * The memserver end of one tcp-provider connection, on its own thread. Requests are executed in arrival order; data
 * moves between the socket and region memory without an intermediate copy. Replies are queued and written together
 * when the input runs dry (or the queue grows large), so a pipelined burst costs one system call each way.
 *
 * <p>An error in one request (bad key, out of range, no capacity) is answered and the connection goes on; a message
 * that cannot be framed (bad magic, impossible length) closes this connection only.
 */
final class TcpServerConnection implements Runnable {
    private static final Logger log = LoggerFactory.getLogger(TcpServerConnection.class);
    private static final int MAX_CONTROL_BODY = 64 << 10;
    private static final int FLUSH_AT_BYTES = 4 << 20;

    private final SocketChannel channel;
    private final RegionService service;
    private final Consumer<TcpServerConnection> onEnd;
    private final String peer;
    private final ConnectionStats stats = new ConnectionStats();
    private final ByteBuffer in = ByteBuffer.allocateDirect(256 << 10).order(ByteOrder.LITTLE_ENDIAN).flip();
    private final ByteBuffer replyArea = ByteBuffer.allocateDirect(256 << 10).order(ByteOrder.LITTLE_ENDIAN);
    private final List<ByteBuffer> replies = new ArrayList<>();
    /** What READ replies send for region memory never written; shared and read-only. */
    private static final ByteBuffer ZEROES = ByteBuffer.allocateDirect(256 << 10).asReadOnlyBuffer();
    private final List<RegionService.Pin> pins = new ArrayList<>();
    private ByteBuffer scratch;
    /** The last request carried large WRITE data: read only the next header and address, so that its data skips in. */
    private boolean afterLarge;
    /** Polls briefly before this thread blocks for input; made on first use. */
    private Spinner spinner;
    private long queuedBytes;
    private volatile RegionService.Session session;

    TcpServerConnection(SocketChannel channel, RegionService service, Consumer<TcpServerConnection> onEnd) {
        this.channel = channel;
        this.service = service;
        this.onEnd = onEnd;
        String p;
        try {
            p = String.valueOf(channel.getRemoteAddress());
        } catch (IOException e) {
            p = "unknown";
        }
        this.peer = p.startsWith("/") ? p.substring(1) : p;
    }

    String peer() {
        return peer;
    }

    void helloDeadline() {
        if (session == null && channel.isOpen()) {
            log.info("client {} did not say hello in time; disconnected", peer);
            service.refused("hello_timeout", channelPeer());
            close();
        }
    }

    private SocketAddress channelPeer() {
        try {
            return channel.getRemoteAddress();
        } catch (IOException e) {
            return null;
        }
    }

    void close() {
        TcpConnection.closeQuietly(channel);
    }

    @Override
    public void run() {
        try {
            if (hello()) {
                serve();
            }
        } catch (EOFException | ClosedChannelException e) {
            log.debug("client {} disconnected", peer);
        } catch (Wire.MalformedMessageException e) {
            log.warn("client {} sent a malformed message ({}); closing its connection", peer, e.getMessage());
            if (session == null) {
                service.refused("malformed", channelPeer());
            }
            tryError(0, 0, Status.BAD_REQUEST, "malformed message: " + e.getMessage());
        } catch (IOException e) {
            log.debug("client {}: {}", peer, e.getMessage());
        } catch (RuntimeException e) {
            log.error("client {}: internal error", peer, e);
        } finally {
            releasePins();
            close();
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
        if (h.length > MAX_CONTROL_BODY) {
            throw new Wire.MalformedMessageException("HELLO of " + h.length + " bytes");
        }
        ensure(h.length);
        ByteBuffer body = take(h.length);
        if (h.version != Wire.VERSION) {
            log.warn("client {} speaks protocol v{}, this memserver v{}; refused", peer, h.version, Wire.VERSION);
            service.refused("version", channelPeer());
            tryError(h.id, h.opcode, Status.VERSION_MISMATCH, "this memserver speaks protocol v" + Wire.VERSION
                    + ", the client v" + h.version + "; upgrade the older side");
            return false;
        }
        String token = Wire.parse("HELLO", () -> Wire.getString(body));
        String name = Wire.parse("HELLO", () -> Wire.getString(body));
        SocketAddress address = channel.getRemoteAddress();
        RegionService.Session s;
        try {
            s = service.open(token, name, address);
        } catch (RemoteMemoryException e) {
            tryError(h.id, h.opcode, e.status(), e.getMessage());
            return false;
        }
        s.attach(stats, this::close);
        ServerInfo info = s.serverInfo();
        ByteBuffer reply = queueReply(Wire.HELLO, h.id, Wire.stringLength(info.serverId()) + 16);
        Wire.putString(reply, info.serverId());
        reply.putLong(info.capacityBytes()).putLong(info.freeBytes());
        session = s;
        flushReplies();
        return true;
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
                case Wire.LIST -> {
                    List<RegionInfo> regions = s.list();
                    int length = 4;
                    for (RegionInfo r : regions) {
                        length += Wire.descriptorLength(r.descriptor()) + Wire.stringLength(r.owner());
                    }
                    ByteBuffer reply = queueReply(h.opcode, h.id, length);
                    reply.putInt(regions.size());
                    for (RegionInfo r : regions) {
                        Wire.putDescriptor(reply, r.descriptor());
                        Wire.putString(reply, r.owner());
                    }
                }
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

    private void skip(long n) throws IOException {
        int buffered = (int) Math.min(in.remaining(), n);
        in.position(in.position() + buffered);
        long left = n - buffered;
        if (left > 0 && scratch == null) {
            scratch = ByteBuffer.allocateDirect(64 << 10);
        }
        while (left > 0) {
            scratch.clear().limit((int) Math.min(scratch.capacity(), left));
            int r = channel.read(scratch);
            if (r < 0) {
                throw new EOFException();
            }
            left -= r;
        }
    }

    // ------------------------------------------------------------------------------------------------ replies

    /** Queues a reply whose whole body the caller puts into the returned buffer. */
    private ByteBuffer queueReply(int opcode, long id, int bodyLength) throws IOException {
        return queueReply(opcode, id, bodyLength, bodyLength);
    }

    /**
     * Queues a reply header announcing {@code length} body bytes, of which the first {@code inline} the caller puts
     * into the returned buffer (the rest, READ data, is queued separately).
     */
    private ByteBuffer queueReply(int opcode, long id, int inline, int length) throws IOException {
        int size = Wire.HEADER + inline;
        if (replyArea.remaining() < size) {
            flushReplies();
        }
        ByteBuffer target = size <= replyArea.remaining() ? replyArea
                : ByteBuffer.allocateDirect(size).order(ByteOrder.LITTLE_ENDIAN);
        int start = target.position();
        Wire.header(target, opcode, id, 0, length);
        ByteBuffer slot = target.slice(start, size).order(ByteOrder.LITTLE_ENDIAN);
        target.position(start + size);
        slot.position(Wire.HEADER);
        replies.add(slot.duplicate().position(0));
        queuedBytes += size;
        stats.sendMessages.increment();
        stats.sendBytes.add(Wire.HEADER + (long) length);
        return slot;
    }

    private void queueError(Header h, Status status, String message) throws IOException {
        int size = Wire.HEADER + Wire.stringLength(message);
        ByteBuffer b = ByteBuffer.allocateDirect(size).order(ByteOrder.LITTLE_ENDIAN);
        Wire.header(b, h.opcode, h.id, status.code(), size - Wire.HEADER);
        Wire.putString(b, message);
        replies.add(b.flip());
        queuedBytes += size;
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
