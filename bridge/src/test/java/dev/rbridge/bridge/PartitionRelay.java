package dev.rbridge.bridge;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A TCP relay in front of a memserver that a test can hold (every byte waits until released, none lost) or partition
 * from its clients as a network would: the connections
 * caught by the partition go silent for good in both directions, and neither end hears of the other's close (no FIN
 * crosses a partition), so the memserver keeps such a connection, and the lease it holds, until the lease's ttl runs
 * out. A SIGSTOPped memserver cannot play this: its kernel still takes the FIN of a client that went away, and the
 * memserver reads it the moment it is thawed. Connections made during the partition are accepted and stay silent too;
 * after {@link #heal()} new connections pass.
 */
final class PartitionRelay implements AutoCloseable {
    private final ServerSocket listener;
    private final InetSocketAddress target;
    private final List<Link> links = new CopyOnWriteArrayList<>();
    private volatile boolean partitioned;
    private volatile boolean held;

    /** One relayed connection; silent once caught by a partition. */
    private static final class Link {
        final Socket client;
        final Socket server;
        volatile boolean silent;

        Link(Socket client, Socket server, boolean silent) {
            this.client = client;
            this.server = server;
            this.silent = silent;
        }
    }

    PartitionRelay(InetSocketAddress target) throws IOException {
        this.target = target;
        this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread.ofPlatform().name("partition-relay-accept").daemon().start(this::acceptLoop);
    }

    InetSocketAddress address() {
        return new InetSocketAddress(InetAddress.getLoopbackAddress(), listener.getLocalPort());
    }

    /** Every connection open now goes silent for good; new ones are accepted and silent until {@link #heal()}. */
    void partition() {
        partitioned = true;
        links.forEach(l -> l.silent = true);
    }

    /**
     * Every connection stops passing bytes, in both directions, until {@link #release()}, losing none: a memserver
     * that stalls (a SIGSTOP, a CPU-starved host) as the bridge sees it, but in this JVM.
     */
    void hold() {
        held = true;
    }

    /** Held connections pass their bytes again. */
    void release() {
        held = false;
    }

    /** New connections pass again; those the partition caught stay silent. */
    void heal() {
        partitioned = false;
    }

    private void acceptLoop() {
        while (!listener.isClosed()) {
            Socket client;
            try {
                client = listener.accept();
            } catch (IOException e) {
                return; // closed
            }
            try {
                Socket server = new Socket(target.getAddress(), target.getPort());
                client.setTcpNoDelay(true);
                server.setTcpNoDelay(true);
                Link l = new Link(client, server, partitioned);
                links.add(l);
                pump(l, client.getInputStream(), server.getOutputStream());
                pump(l, server.getInputStream(), client.getOutputStream());
            } catch (IOException e) {
                closeQuietly(client);
            }
        }
    }

    private void pump(Link l, InputStream in, OutputStream out) {
        Thread.ofPlatform().name("partition-relay-pump").daemon().start(() -> {
            byte[] buf = new byte[64 << 10];
            try {
                while (true) {
                    while (l.silent) {
                        Thread.sleep(10); // read nothing: the sender's data and its close stay this side
                    }
                    while (held && !l.silent) {
                        Thread.sleep(1); // read nothing yet: the bytes wait in the sender's socket
                    }
                    int n = in.read(buf);
                    if (l.silent) {
                        return; // what arrived as the partition began is lost, as on a cut link
                    }
                    if (n < 0) {
                        out.close();
                        return;
                    }
                    out.write(buf, 0, n);
                }
            } catch (IOException | InterruptedException e) {
                // the relay or one side closed
            }
        });
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // nothing more to do with it
        }
    }

    @Override
    public void close() {
        try {
            listener.close();
        } catch (IOException e) {
            // closing
        }
        for (Link l : links) {
            closeQuietly(l.client);
            closeQuietly(l.server);
        }
    }
}
