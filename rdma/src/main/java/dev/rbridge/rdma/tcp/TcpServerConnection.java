package dev.rbridge.rdma.tcp;

import dev.rbridge.common.Closeables;
import dev.rbridge.common.RateLimitedLog;
import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.wire.Admission;
import dev.rbridge.rdma.wire.ControlDispatcher;
import dev.rbridge.rdma.wire.GatedListener;
import dev.rbridge.rdma.wire.MalformedMessageException;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageDecoder;
import dev.rbridge.rdma.wire.MessageEncoder;
import dev.rbridge.rdma.wire.MessageReader;
import dev.rbridge.rdma.wire.Opcode;
import dev.rbridge.rdma.wire.Protocol;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import dev.rbridge.rdma.link.Link;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The memserver end of one tcp-provider connection, on its own thread. Requests are executed in arrival order; data
 * moves between the socket and region memory without an intermediate copy. Replies are queued and written together
 * when the input runs dry (or the queue grows large), so a pipelined burst costs one system call each way. The
 * control protocol itself (the greeting and its refusals, what each request means) is the {@code wire} package's.
 *
 * <p>Until the client has authenticated, the connection holds {@value #HELLO_INPUT} bytes of input buffer and
 * {@value #HELLO_REPLIES} of reply buffer, on the heap, made by its own thread: a peer without the token costs a
 * thread and a few kilobytes until the hello timeout, never the large direct buffers an authenticated client gets. Every
 * reply, a LIST of many regions included, goes out through the fixed reply buffer, so what a client asks for never
 * decides an allocation; a client that does not read a LIST within the hello timeout is cut off, so the listing it
 * holds in memory is not held for long.
 *
 * <p>An error in one request (bad key, out of range, no capacity) is answered and the connection goes on; a message
 * that cannot be framed (bad magic, impossible length) closes this connection only. A WRITE's data must arrive within
 * the hello timeout of its header (the payload deadline), as must a LIST's reader: either holds memory.
 */
final class TcpServerConnection implements GatedListener.Connection {
    private static final Logger log = LoggerFactory.getLogger(TcpServerConnection.class);
    /** What peers can make this class log (listings not read) is logged at most once per reason often. */
    private static final RateLimitedLog limited = new RateLimitedLog(log);
    /** Input buffer before authentication: a whole HELLO, and what an eager client pipelines behind it. */
    static final int HELLO_INPUT = 8 << 10;
    /** Reply buffer before authentication: the HELLO reply, or an error of at most a few KiB. */
    static final int HELLO_REPLIES = 4 << 10;
    /** Input and reply buffers once authenticated: room for pipelined bursts of small requests and their replies. */
    static final int BUFFER = 256 << 10;
    private static final int FLUSH_AT_BYTES = 4 << 20;

    private final SocketChannel channel;
    /** The socket, or TLS over it: what requests are read from and replies written to; set first thing. */
    private Link link;
    /** The greeting, the hello guard, and the counting of refusals. */
    private final Admission admission;
    /** Where the buffers of an authenticated client come from and go back to. */
    private final DirectBufferPool buffers;
    /** TCP congestion control, set once the client has authenticated. */
    private final String congestion;
    private final Consumer<TcpServerConnection> onEnd;
    private final String peer;
    private final long helloTimeoutMillis;
    private final ConnectionStats stats = new ConnectionStats();
    private final MessageDecoder decoder = MessageDecoder.forMemserver();
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
    /** Reads from the socket so far; written by this connection's thread only (tests count them). */
    private volatile long socketReads;

    TcpServerConnection(SocketChannel channel, Admission admission, DirectBufferPool buffers, String congestion,
            long helloTimeoutMillis, Consumer<TcpServerConnection> onEnd) {
        this.channel = channel;
        this.admission = admission;
        this.buffers = buffers;
        this.congestion = congestion;
        this.helloTimeoutMillis = helloTimeoutMillis;
        this.onEnd = onEnd;
        this.peer = admission.peer();
    }

    @Override
    public void close() {
        Closeables.closeQuietly(channel);
    }

    @Override
    public void run() {
        try {
            // On the heap: the JDK reads and writes heap buffers through a direct buffer of this thread's, freed
            // when the thread ends, so a flood of short-lived connections leaves no direct memory for the GC to find.
            ByteBuffer hello = ByteBuffer.allocate(HELLO_INPUT + HELLO_REPLIES);
            in = hello.slice(0, HELLO_INPUT).order(ByteOrder.LITTLE_ENDIAN).flip();
            replyArea = hello.slice(HELLO_INPUT, HELLO_REPLIES).order(ByteOrder.LITTLE_ENDIAN);
            link = Link.plain(channel); // a client refused for speaking in clear is told so in clear
            link = admission.link(channel);
            RegionService.Session s = greet();
            if (s != null) {
                serve(s);
            }
        } catch (IOException | MalformedMessageException | RuntimeException | OutOfMemoryError e) {
            Message.Error bye = admission.failed(e);
            if (bye != null && replyArea != null && link != null) {
                tryReply(bye);
            }
        } finally {
            releasePins();
            close();
            replies.clear();
            if (in != null && in.isDirect()) {
                buffers.give(in);
                buffers.give(replyArea);
            }
            in = null;
            replyArea = null;
            admission.closed();
            onEnd.accept(this);
        }
    }

    // ----------------------------------------------------------------------------------------------- greeting

    /** The admitted client's session, or null when the greeting ended the connection. */
    private RegionService.Session greet() throws IOException, MalformedMessageException {
        Admission.Greeting greeting = admission.greet(next());
        while (greeting instanceof Admission.Challenge c) {
            queue(c.reply());
            flushReplies();
            greeting = admission.greet(next());
        }
        switch (greeting) {
            case Admission.Challenge c -> throw new IllegalStateException("answered above");
            case Admission.Refused r -> {
                if (r.reply() != null) {
                    tryReply(r.reply());
                }
                return null;
            }
            case Admission.Admitted a -> {
                try {
                    grow();
                } catch (OutOfMemoryError e) {
                    tryReply(admission.noMemory(a.helloId(), e));
                    return null;
                }
                TcpSockets.tune(channel);
                TcpCongestion.apply(channel, congestion);
                a.session().attach(stats, this::close);
                queue(a.welcome());
                flushReplies();
                return a.session();
            }
        }
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

    private void serve(RegionService.Session s) throws IOException, MalformedMessageException {
        while (true) {
            Message m = next();
            stats.recvMessages.increment();
            stats.recvBytes.add(Protocol.HEADER + (long) decoder.length());
            switch (m) {
                case Message.Write w -> write(s, w);
                case Message.Read r -> {
                    afterLarge = false;
                    read(s, r);
                }
                case Message.ListRegions l -> {
                    afterLarge = false;
                    list(s, l);
                }
                default -> {
                    afterLarge = false;
                    queue(ControlDispatcher.answer(s, m));
                }
            }
            if (queuedBytes >= FLUSH_AT_BYTES) {
                flushReplies();
            }
        }
    }

    /** The range {@code request} names, pinned; or null, its refusal queued as the answer. */
    private RegionService.Pin pinOrRefuse(RegionService.Session s, Message request, long regionId, long key,
            long offset, int length) throws IOException {
        try {
            return s.pin(regionId, key, offset, length);
        } catch (RemoteMemoryException e) {
            queue(ControlDispatcher.error(request, e.status(), e.getMessage()));
            return null;
        }
    }

    private void write(RegionService.Session s, Message.Write w) throws IOException {
        int length = w.length();
        RegionService.Pin pin = pinOrRefuse(s, w, w.regionId(), w.key(), w.offset(), length);
        if (pin == null) {
            decoder.skipPayload(); // dropped as it comes in
            return;
        }
        try (pin) {
            ByteBuffer dst = pin.memory().asByteBuffer();
            int buffered = Math.min(in.remaining(), length);
            dst.put(in.slice(in.position(), buffered));
            in.position(in.position() + buffered);
            if (dst.hasRemaining()) {
                // The rest straight from the socket into region memory, within a deadline: the pin holds the region's
                // memory (and a takeover of its volume waits for it), so a client may not keep it by stalling.
                Future<?> deadline = TcpProvider.TIMER.schedule(this::payloadDeadline, helloTimeoutMillis,
                        TimeUnit.MILLISECONDS);
                try {
                    TcpSockets.readFully(link, dst);
                } finally {
                    deadline.cancel(false);
                }
            }
            pin.wrote();
        }
        decoder.payloadMoved(length);
        afterLarge = length >= TcpSockets.LARGE;
        stats.writeOps.increment();
        stats.writeBytes.add(length);
        queue(new Message.WriteReply(w.id()));
    }

    private void read(RegionService.Session s, Message.Read r) throws IOException {
        int length = r.length();
        RegionService.Pin pin = pinOrRefuse(s, r, r.regionId(), r.key(), r.offset(), length);
        if (pin == null) {
            return;
        }
        pins.add(pin); // held until the reply data is on the wire
        queue(new Message.ReadReply(r.id(), length), length);
        pin.runs((at, n, written) -> {
            if (written) {
                replies.add(pin.memory().asSlice(at, n).asByteBuffer());
            } else { // never written: zeroes from a shared buffer, so that no page of the region gets backed
                for (long done = 0; done < n;) {
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

    /**
     * Entry by entry through the reply buffer, flushed as it fills: however many regions there are, listing them
     * allocates nothing for the reply. The listing keeps one of the memserver's few listing places until its last
     * entry is in the reply buffer; a client that does not read for the hello timeout meanwhile is cut off, which
     * gives the place back (otherwise a few clients that never read would keep every other client from listing).
     */
    private void list(RegionService.Session s, Message.ListRegions l) throws IOException {
        ControlDispatcher.Listed listed = ControlDispatcher.list(s, l);
        if (listed.error() != null) {
            queue(listed.error());
            return;
        }
        try (RegionService.Listing listing = listed.listing()) {
            List<RegionInfo> regions = listing.regions();
            Future<?> deadline = TcpProvider.TIMER.schedule(this::listingDeadline, helloTimeoutMillis,
                    TimeUnit.MILLISECONDS);
            try {
                MessageEncoder.listReplyStart(queueSlot(Protocol.HEADER + 4), l.id(), regions.size(),
                        listed.bodyLength());
                stats.sendMessages.increment();
                stats.sendBytes.add(Protocol.HEADER + (long) listed.bodyLength());
                for (RegionInfo r : regions) {
                    MessageEncoder.listEntry(queueSlot(MessageEncoder.listEntrySize(r)), r);
                }
            } finally {
                deadline.cancel(false);
            }
        }
    }

    private void payloadDeadline() {
        limited.info("payload_timeout", "client {} did not send the data of its WRITE within {} ms; disconnected",
                peer, helloTimeoutMillis);
        close();
    }

    private void listingDeadline() {
        limited.info("listing_timeout", "client {} did not read its region listing within {} ms; disconnected",
                peer, helloTimeoutMillis);
        close();
    }

    // ------------------------------------------------------------------------------------------ input

    /** Reads from the socket so far. */
    long socketReads() {
        return socketReads;
    }

    /**
     * The next request. A message that fits the input buffer is read in whole first (a WRITE up to its data), so the
     * decoder reads it where it lies and allocates nothing for it.
     */
    private Message next() throws IOException, MalformedMessageException {
        if (decoder.atBoundary()) {
            ensure(Protocol.HEADER);
            int length = in.getInt(in.position() + 20);
            boolean write = Short.toUnsignedInt(in.getShort(in.position() + 6)) == Opcode.WRITE.code();
            int whole = write ? Math.min(length, Protocol.DATA_ADDRESS) : length;
            if (whole >= 0 && whole <= (decoder.awaitingHello() ? Protocol.MAX_HELLO_BODY
                    : Protocol.MAX_CONTROL_BODY)) {
                ensure(Protocol.HEADER + whole);
            }
        }
        Message m;
        while ((m = decoder.next(in)) == null) {
            // Bytes being skipped (a refused WRITE's data, an unknown opcode's body): as much as the buffer takes,
            // whatever came before; they go nowhere, so there is no copy to save by reading little.
            readMore(Integer.MAX_VALUE);
        }
        return m;
    }

    /**
     * Makes at least {@code n} bytes readable in {@code in}. After a large WRITE it reads no more than the next
     * header and address, so that the next WRITE's data, likely large too, goes from the socket straight to memory.
     */
    private void ensure(int n) throws IOException {
        while (in.remaining() < n) {
            readMore(afterLarge ? Math.max(n, Protocol.HEADER + Protocol.DATA_ADDRESS) : Integer.MAX_VALUE);
        }
    }

    /** Reads more input, up to {@code upTo} unread bytes in all; before blocking for it, sends queued replies. */
    private void readMore(int upTo) throws IOException {
        flushReplies();
        if (spinner == null) {
            spinner = new Spinner(link, null);
        }
        spinner.await();
        socketReads++;
        MessageReader.readMore(link, in, upTo);
    }

    // ------------------------------------------------------------------------------------------------ replies

    /** Queues a reply: its header and body in the reply buffer. */
    private void queue(Message reply) throws IOException {
        queue(reply, 0);
    }

    /** Queues a reply followed by {@code dataBytes} of READ data, which the caller queues after it. */
    private void queue(Message reply, int dataBytes) throws IOException {
        int written = MessageEncoder.encode(reply, queueSlot(MessageEncoder.size(reply)));
        stats.sendMessages.increment();
        stats.sendBytes.add(written + (long) dataBytes);
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

    /** Best effort: tell a client why it is being disconnected. */
    private void tryReply(Message.Error reply) {
        try {
            queue(reply);
            flushReplies();
        } catch (IOException | RuntimeException e) {
            log.debug("could not tell {} why: {}", peer, e.toString());
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
                link.write(vector, first, vector.length - first);
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
