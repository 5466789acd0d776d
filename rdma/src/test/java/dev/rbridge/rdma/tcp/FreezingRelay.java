package dev.rbridge.rdma.tcp;

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
 * A TCP relay between clients and a real listener that can stop forwarding at a chosen byte: how a test makes a live
 * peer go silent in the middle of a reply (SIGSTOP cannot be aimed at a byte). Not a mock: every byte that passes
 * comes from the listener; the relay only holds back what comes after the point it was told.
 */
final class FreezingRelay implements AutoCloseable {
    private final ServerSocket listener;
    private final InetSocketAddress target;
    private final List<Socket> sockets = new CopyOnWriteArrayList<>();
    /** Bytes still to forward from the memserver to clients; then it holds the rest. */
    private volatile long downBudget = Long.MAX_VALUE;
    /** Stop forwarding from clients to the memserver (and so stop reading what they write). */
    private volatile boolean upFrozen;

    FreezingRelay(InetSocketAddress target) throws IOException {
        this.target = target;
        this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread t = new Thread(this::acceptLoop, "relay-accept");
        t.setDaemon(true);
        t.start();
    }

    InetSocketAddress address() {
        return new InetSocketAddress(InetAddress.getLoopbackAddress(), listener.getLocalPort());
    }

    /** From now on, forwards only {@code bytes} more from the memserver to its clients. */
    void passDown(long bytes) {
        downBudget = bytes;
    }

    /** Forwards nothing more in either direction, and reads nothing more from either side. */
    void freeze() {
        upFrozen = true;
        downBudget = 0;
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
                pump(client.getInputStream(), server.getOutputStream(), false);
                pump(server.getInputStream(), client.getOutputStream(), true);
            } catch (IOException e) {
                // The memserver is unreachable: say so and drop this client (it sees the connection close), and go
                // on accepting rather than leave later clients hanging.
                System.err.println("relay: cannot reach memserver " + target + ": " + e);
                try {
                    client.close();
                } catch (IOException ignored) {
                    // closing a socket we are giving up on
                }
            }
        }
    }

    private void pump(InputStream in, OutputStream out, boolean down) {
        Thread t = new Thread(() -> {
            byte[] buf = new byte[64 << 10];
            try {
                while (true) {
                    while (allowed(down, buf.length) == 0) {
                        Thread.sleep(5); // held: read nothing, so the sender's buffers fill as with a stopped peer
                    }
                    int n = in.read(buf, 0, allowed(down, buf.length));
                    if (n < 0) {
                        out.close();
                        return;
                    }
                    // The relay may have frozen while this read waited: forward only what is still allowed.
                    for (int sent = 0; sent < n; ) {
                        int now = allowed(down, n - sent);
                        if (now == 0) {
                            Thread.sleep(5);
                            continue;
                        }
                        if (down) {
                            downBudget -= now; // one pump per direction and connection; tests use one connection
                        }
                        out.write(buf, sent, now);
                        sent += now;
                    }
                }
            } catch (IOException | InterruptedException e) {
                // the relay or one side closed
            }
        }, down ? "relay-down" : "relay-up");
        t.setDaemon(true);
        t.start();
    }

    private int allowed(boolean down, int wanted) {
        return (int) (down ? Math.min(wanted, downBudget) : upFrozen ? 0 : wanted);
    }

    @Override
    public void close() throws IOException {
        listener.close();
        for (Socket s : sockets) {
            s.close();
        }
    }
}
