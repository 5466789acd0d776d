package dev.rbridge.nbd.server;

import dev.rbridge.nbd.protocol.NbdProtocolException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;
import java.util.concurrent.atomic.AtomicReference;

/**
 * One client connection, run by one platform thread from accept to close: the {@link Handshake} (blocking), then the
 * {@link Transmission} of the {@link Session} agreed in it. A protocol violation ends this connection only.
 *
 * <p>This class keeps what the server sees of the connection whatever its phase: its identity, the clocks and holdings
 * the {@link NbdServer}'s slots and housekeeper judge it by (the housekeeper closes it when a handshake, a
 * half-received request or an unread reply overstays), the decision to close it, and its ending: the drain of what
 * is in flight, then everything it held given back, exactly once.
 */
final class Connection implements Runnable {
    private static final Logger log = LoggerFactory.getLogger(Connection.class);

    private final NbdServer server;
    private final SocketChannel channel;
    private final long id;
    private final String peer;
    private final String peerAddress;
    private final long acceptedNanos;
    private final NbdServerMetrics metrics;
    /** Set once, when the client enters transmission (before it hears that it did); null during the handshake. */
    private volatile Transmission transmission;
    private volatile boolean draining;
    /** Why the server closed this connection, if it did (the housekeeper's reason), else null. */
    private final AtomicReference<String> closedBecause = new AtomicReference<>();

    Connection(NbdServer server, SocketChannel channel, long id, String peer, String peerAddress) {
        this.server = server;
        this.channel = channel;
        this.id = id;
        this.peer = peer;
        this.peerAddress = peerAddress;
        this.metrics = server.config().metrics();
        this.acceptedNanos = System.nanoTime();
    }

    long id() {
        return id;
    }

    String peer() {
        return peer;
    }

    /** The peer's address without the port: what the per-peer limits count by. */
    String peerAddress() {
        return peerAddress;
    }

    boolean inTransmission() {
        return transmission != null;
    }

    long acceptedNanos() {
        return acceptedNanos;
    }

    /**
     * Since when the client has been sending a request that has not fully arrived, or 0 (at a request boundary, while
     * the connection does not read, and during the handshake).
     */
    long partialSinceNanos() {
        Transmission t = transmission;
        return t == null ? 0 : t.partialSinceNanos();
    }

    /** The last time a request started or finished, or the connection entered transmission or was accepted. */
    long lastActiveNanos() {
        Transmission t = transmission;
        return t == null ? acceptedNanos : t.lastActiveNanos();
    }

    /** The last time bytes of a request arrived, or 0. */
    long lastReadNanos() {
        Transmission t = transmission;
        return t == null ? 0 : t.lastReadNanos();
    }

    /** Nanos since when replies have waited for the client to read them, or 0. */
    long repliesStalledSinceNanos() {
        Transmission t = transmission;
        return t == null ? 0 : t.repliesStalledSinceNanos();
    }

    /** Payload bytes this connection holds now (buffers being received, at the device, or waiting to be sent). */
    long heldBytes() {
        Transmission t = transmission;
        return t == null ? 0 : t.heldBytes();
    }

    /**
     * Nothing in flight, nothing half-received, no memory held, nothing waiting to be written: giving up this
     * connection loses no work. (A request that waits for memory but holds none does not count: so that connections
     * waiting for memory cannot hold every slot.)
     */
    boolean idle() {
        Transmission t = transmission;
        return t == null || t.idle();
    }

    /** The server already decided to close this connection. */
    boolean closing() {
        return closedBecause.get() != null;
    }

    /** The server shuts down: requests are no longer started (see {@link #beginDrain}). */
    boolean draining() {
        return draining;
    }

    @Override
    public void run() {
        String ending = "closed by client";
        try {
            Handshake handshake = new Handshake(server, channel, id, peer, this::enterTransmission, this::noSlot);
            if (handshake.run() != null) {
                transmission.run(handshake.leftover());
            }
        } catch (EOFException e) {
            ending = inTransmission() ? "client closed the connection"
                    : "client closed the connection during the handshake";
        } catch (NbdProtocolException e) {
            ending = "protocol violation: " + e.getMessage();
            metrics.protocolViolation();
            server.logLimited("protocol", "connection {} from {}: {}; closing this connection only", id, peer, ending);
        } catch (ClosedChannelException e) {
            ending = closing() ? closedBecause.get() : server.closing() ? "server shutdown" : "connection closed";
        } catch (IOException e) {
            ending = closing() ? closedBecause.get() : "I/O error: " + e.getMessage();
        } catch (RuntimeException | OutOfMemoryError e) {
            ending = "internal error: " + e;
            log.error("connection {} from {}: internal error", id, peer, e);
        } finally {
            finish(ending);
        }
    }

    /**
     * Enters transmission with {@code session}; false, and nothing changed, when the server has no slot for a
     * connection let in over its limits after all ({@link NbdServer#enterTransmission}): the client must be let go.
     */
    private boolean enterTransmission(Session session) {
        if (!server.enterTransmission(this)) {
            return false;
        }
        Export e = session.export();
        NbdServerMetrics.ExportMetrics exportMetrics = metrics.export(e.name());
        transmission = new Transmission(this, server, channel, session, exportMetrics);
        exportMetrics.connectionOpened();
        log.info("connection {} from {}: serving export '{}' ({} bytes{}{})", id, peer, e.name(), e.size(),
                e.readOnly() ? ", read-only" : "", session.structuredReplies() ? ", structured replies" : "");
        return true;
    }

    /** What ends a connection the server had no slot for at the end of its handshake. */
    private ClosedChannelException noSlot() {
        decideToClose("no slot at the end of its handshake (the connection limits)");
        return new ClosedChannelException();
    }

    /**
     * Stops taking new requests so in-flight ones can finish: with structured replies they get ESHUTDOWN; with simple
     * replies (the kernel) they get no answer, and the client retries them after the connection closes.
     */
    void beginDrain() {
        draining = true;
        Transmission t = transmission;
        if (t != null) {
            t.wakeup(); // a request waiting for room is now answered at once
        }
    }

    /** True when nothing is in flight and every reply has been written. */
    boolean quiescent() {
        Transmission t = transmission;
        return t == null || t.quiescent();
    }

    /**
     * The server decides to close this connection (a limit or a timeout); {@code reason} is how its end is logged.
     * False when it was already decided for another reason (only the first counts). The caller counts and logs the
     * closing, then calls {@link #closeChannel}: so whoever sees the connection end also sees it counted.
     */
    boolean decideToClose(String reason) {
        return closedBecause.compareAndSet(null, reason);
    }

    void closeChannel() {
        Transmission t = transmission;
        SecureWire tls = t == null ? null : t.session().tls();
        if (tls != null && channel.isOpen() && !channel.isBlocking()) {
            // close_notify, if the socket takes it now. Never while the socket blocks (the NBD handshake): this may
            // be the housekeeper's or the listener's thread, and a client that reads nothing would hold it for ever.
            tls.closeQuietly();
        }
        try {
            channel.close();
        } catch (IOException e) {
            log.debug("connection {}: close failed", id, e);
        }
        if (t != null) {
            t.channelClosed();
        }
    }

    private void finish(String ending) {
        Transmission t = transmission;
        if (t != null) {
            t.drain();
        }
        closeChannel();
        if (t != null) {
            t.release();
            log.info("connection {} from {}: {} after {} requests", id, peer, ending, t.requests());
        } else {
            log.debug("connection {} from {}: {}", id, peer, ending);
        }
        server.connectionEnded(this);
    }
}
