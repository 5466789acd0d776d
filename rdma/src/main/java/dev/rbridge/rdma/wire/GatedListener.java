package dev.rbridge.rdma.wire;

import dev.rbridge.rdma.ConnectionGate;
import dev.rbridge.rdma.GatedAcceptor;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteListener;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledExecutorService;

/**
 * A memserver's listener whose clients come through the shared {@link GatedAcceptor} and speak the control protocol
 * (the tcp and ucx providers'): a refused peer reads the {@link Admission#refusal} of its greeting; each admitted
 * connection gets its {@link Admission}, its hello guard and a platform thread of its own, and counts until it ends.
 * The provider makes the connection ({@link #connection}) and serves it on that thread.
 *
 * @param <C> the provider's memserver end of one connection
 */
public abstract class GatedListener<C extends GatedListener.Connection> implements RemoteListener {

    /** The memserver end of one connection: run on its own thread, which ends once the socket is closed. */
    public interface Connection extends Runnable {
        /** Closes the socket (the hello guard and the listener's close call it, from any thread). */
        void close();
    }

    private final String transport;
    private final ListenParams params;
    private final RegionService service;
    private final ScheduledExecutorService timer;
    private final Set<C> connections = ConcurrentHashMap.newKeySet();
    private GatedAcceptor acceptor;

    /**
     * @param transport the provider's name, in thread names and log lines
     * @param timer     runs the hello guards
     */
    protected GatedListener(String transport, ListenParams params, RegionService service,
            ScheduledExecutorService timer) {
        this.transport = transport;
        this.params = params;
        this.service = service;
        this.timer = timer;
    }

    /** Starts accepting on {@code server} (from {@link GatedAcceptor#bind}), once the listener is ready to serve. */
    protected final void accept(ServerSocketChannel server) throws IOException {
        acceptor = GatedAcceptor.start(transport, server, params.limits(), service, new GatedAcceptor.Transport() {
            @Override
            public void start(SocketChannel channel, InetSocketAddress remote, ConnectionGate.Slot slot) {
                serve(channel, remote, slot);
            }

            @Override
            public ByteBuffer refusal(String message) {
                return Admission.refusal(message);
            }
        });
    }

    protected final ListenParams params() {
        return params;
    }

    /** The memserver end of an admitted connection, not started yet; made on the accept loop's thread. */
    protected abstract C connection(SocketChannel channel, Admission admission);

    /** Starts an admitted connection's thread, its hello guard running. */
    private void serve(SocketChannel channel, InetSocketAddress remote, ConnectionGate.Slot slot) {
        Admission admission = new Admission(service, remote, slot, params.tls(), params.tlsVerifyPeer());
        C c = connection(channel, admission);
        connections.add(c);
        try {
            admission.guard(timer, params.helloTimeout().toMillis(), c::close);
            Thread t = new Thread(c, "rdma-" + transport + "-conn-" + admission.peer());
            t.setDaemon(true);
            t.start();
        } catch (Throwable e) { // no thread: undo what was done, and the accept loop counts and goes on
            c.close();
            admission.closed();
            ended(c);
            throw e;
        }
    }

    /** {@code c} ended (its thread ran out, or could not start): it no longer counts. */
    protected void ended(C c) {
        connections.remove(c);
    }

    @Override
    public final InetSocketAddress address() {
        return acceptor.address();
    }

    @Override
    public final int connectionCount() {
        return connections.size();
    }

    @Override
    public final String problem() {
        return acceptor.problem();
    }

    /** Stops accepting and closes every connection; a provider with more to let go of does so after. */
    @Override
    public void close() {
        acceptor.close();
        connections.forEach(Connection::close);
    }
}
