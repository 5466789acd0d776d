package dev.rbridge.rdma.ucx;

import dev.rbridge.common.Closeables;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ServerInfo;
import dev.rbridge.rdma.link.Link;
import dev.rbridge.rdma.wire.ControlClient;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.Opcode;
import dev.rbridge.rdma.wire.WireBytes;
import org.openucx.jucx.ucp.UcpContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * Connects a {@link UcxConnection}: the control connection (TCP, or TLS over it) and its greeting, a UCX worker of
 * the connection's own, the exchange of worker addresses (UCX_CONNECT) and the probe word's whereabouts (UCX_PROBE),
 * then the endpoint and the wire-up, all within the connect timeout.
 */
final class UcxConnector {
    private static final Logger log = LoggerFactory.getLogger(UcxConnection.class);

    private final ConnectParams params;
    private final String peer;
    private final UcpContext context;
    private final SocketChannel ch;
    /** Closes the socket once the connect timeout is over. */
    private final ScheduledFuture<?> guard;
    /** The connection's worker, once there is one. */
    private UcxLoop loop;

    private UcxConnector(ConnectParams params, String peer, UcpContext context, SocketChannel ch) {
        this.params = params;
        this.peer = peer;
        this.context = context;
        this.ch = ch;
        this.guard = UcxListener.TIMER.schedule(() -> Closeables.closeQuietly(ch), params.connectTimeout().toMillis(),
                TimeUnit.MILLISECONDS);
    }

    static UcxConnection connect(ConnectParams params) throws RemoteMemoryException {
        String peer = params.address().getHostString() + ":" + params.address().getPort();
        UcpContext context = Ucx.context();
        SocketChannel ch;
        try {
            ch = SocketChannel.open();
        } catch (IOException e) {
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "cannot open a socket: " + e.getMessage(), e);
        }
        return new UcxConnector(params, peer, context, ch).connect();
    }

    private UcxConnection connect() throws RemoteMemoryException {
        try {
            return steps();
        } catch (IOException e) {
            boolean timedOut = !guard.cancel(false);
            abandon();
            String why = timedOut ? "no answer within " + params.connectTimeout().toMillis() + " ms"
                    : e.getMessage() == null ? e.toString() : e.getMessage();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "cannot reach memserver " + peer + ": " + why, e);
        } catch (RemoteMemoryException e) {
            guard.cancel(false);
            abandon();
            throw e;
        } catch (Exception e) {
            guard.cancel(false);
            abandon();
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "UCX could not connect to memserver " + peer + ": "
                    + e.getMessage(), e);
        }
    }

    /** The steps of a connect, in order; any failure is {@link #connect()}'s to report. */
    private UcxConnection steps() throws Exception {
        Ucx.tuneControlSocket(ch);
        ch.socket().connect(params.address(), (int) params.connectTimeout().toMillis());
        Link link = ControlClient.link(ch, params.tls(), params.address(), peer);
        ServerInfo info = ControlClient.greet(link, peer, params.token(), params.clientName());
        long spinForTests = UcxConnection.spinBudgetNanosForTests;
        loop = new UcxLoop(context, "rdma-ucx-progress-" + peer, spinForTests >= 0 ? new ProgressSpin(spinForTests)
                : ProgressSpin.fromEnvironment(System.getenv(),
                        Ucx.registrationPinsPages(System.getenv(), Ucx.rdmaDevices())));
        UcxLoop worker = loop;
        ByteBuffer serverAddress = ucxConnect(link, peer, loop.call(() -> worker.worker.getAddress(),
                params.connectTimeout().toMillis()));
        Message.UcxProbeReply probe = ucxProbe(link, peer);
        if (!guard.cancel(false)) {
            throw new IOException("timed out");
        }
        UcxConnection c = new UcxConnection(link, peer, params, info, loop);
        c.connectEndpoint(serverAddress, params.connectTimeout().toMillis());
        c.finishConnect(probe, params.connectTimeout().toMillis());
        return c;
    }

    /** After a failed connect: the socket and the worker go. */
    private void abandon() {
        Closeables.closeQuietly(ch);
        if (loop != null) {
            loop.close();
        }
    }

    /**
     * The memserver worker's UCX address, asked right after the greeting, before the reader thread runs, with this
     * connection's worker address, to which the memserver makes an endpoint of its own (see
     * {@link UcxServerConnection}).
     */
    private static ByteBuffer ucxConnect(Link ch, String peer, ByteBuffer clientAddress)
            throws IOException, RemoteMemoryException {
        return switch (ControlClient.exchange(ch, peer, new Message.UcxConnect(0, WireBytes.copyOf(clientAddress)))) {
            case Message.UcxConnectReply r -> UcxRemoteKeys.direct(r.workerAddress().buffer());
            case Message.Error e when e.message().contains("unexpected OP_") -> throw new RemoteMemoryException(
                    Status.CONNECT_FAILED, "memserver " + peer + " does not serve the ucx transport (it runs another "
                            + "one, tcp by default); start it with --transport ucx or connect with its transport");
            case Message.Error e -> throw new RemoteMemoryException(Status.of(e.status()), "memserver " + peer
                    + " refused the connection: " + e.message());
            case Message other -> throw new IOException(peer + " sent a malformed UCX_CONNECT reply ("
                    + ControlClient.describe(other) + ")");
        };
    }

    /**
     * Where the memserver's probe word is, asked right after UCX_CONNECT; null from a memserver that predates
     * UCX_PROBE (its wire-up is then awaited with the endpoint flush alone).
     */
    private static Message.UcxProbeReply ucxProbe(Link ch, String peer)
            throws IOException, RemoteMemoryException {
        return switch (ControlClient.exchange(ch, peer, new Message.UcxProbe(0))) {
            case Message.UcxProbeReply r -> r;
            case Message.Error e when e.message().contains("unexpected OP_" + Opcode.UCX_PROBE.code()) -> {
                log.debug("memserver {} predates UCX_PROBE: waiting for the UCX wire-up with a flush alone", peer);
                yield null;
            }
            case Message.Error e -> throw new RemoteMemoryException(Status.of(e.status()), "memserver " + peer
                    + " refused the connection: " + e.message());
            case Message other -> throw new IOException(peer + " sent a malformed UCX_PROBE reply ("
                    + ControlClient.describe(other) + ")");
        };
    }

}
