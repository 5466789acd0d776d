package dev.rbridge.rdma;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A TCP relay on a loopback port between clients and a real listener: accepts, connects each client to the target,
 * and hands both sockets to {@link #relay}, which starts the pumps that make a subclass what it is (one that freezes
 * at a chosen byte, one that injects bytes of its own). An unreachable target drops that client only. Closing closes
 * the port and every relayed socket.
 */
public abstract class TcpRelay implements AutoCloseable {
    private final ServerSocket listener;
    protected final InetSocketAddress target;
    private final List<Socket> sockets = new CopyOnWriteArrayList<>();
    private boolean accepting;

    protected TcpRelay(InetSocketAddress target) throws IOException {
        this.target = target;
        this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    }

    /**
     * Where to connect. The first call starts accepting: a client can only connect once it knows the port, and the
     * subclass is whole by then (a thread started in this constructor could relay through a half-made subclass).
     */
    public synchronized InetSocketAddress address() {
        if (!accepting) {
            accepting = true;
            Thread t = new Thread(this::acceptLoop, "relay-accept");
            t.setDaemon(true);
            t.start();
        }
        return new InetSocketAddress(InetAddress.getLoopbackAddress(), listener.getLocalPort());
    }

    /** Whether the relay was closed: pumps that wait stop waiting. */
    protected boolean closed() {
        return listener.isClosed();
    }

    /** Starts whatever moves bytes between {@code client} and {@code server} (both with TCP_NODELAY). */
    protected abstract void relay(Socket client, Socket server) throws IOException;

    /** A daemon thread for one direction of one connection. */
    protected static void start(String name, Runnable pump) {
        Thread t = new Thread(pump, name);
        t.setDaemon(true);
        t.start();
    }

    private void acceptLoop() {
        while (!listener.isClosed()) {
            Socket client;
            try {
                client = listener.accept();
            } catch (IOException e) {
                return; // closed
            }
            sockets.add(client);
            try {
                Socket server = new Socket(target.getAddress(), target.getPort());
                sockets.add(server);
                client.setTcpNoDelay(true);
                server.setTcpNoDelay(true);
                relay(client, server);
            } catch (IOException e) {
                // The target is unreachable: say so and drop this client (it sees the connection close), and go on
                // accepting rather than leave later clients hanging.
                System.err.println("relay: cannot reach " + target + ": " + e);
                try {
                    client.close();
                } catch (IOException ignored) {
                    // closing a socket we are giving up on
                }
            }
        }
    }

    @Override
    public void close() throws IOException {
        listener.close();
        for (Socket s : sockets) {
            s.close();
        }
    }
}
