package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.TcpRelay;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;

/**
 * A TCP relay between clients and a real listener that can stop forwarding at a chosen byte: how a test makes a live
 * peer go silent in the middle of a reply (SIGSTOP cannot be aimed at a byte). Not a mock: every byte that passes
 * comes from the listener; the relay only holds back what comes after the point it was told.
 */
public final class FreezingRelay extends TcpRelay {
    /** Bytes still to forward from the memserver to clients; then it holds the rest. */
    private volatile long downBudget = Long.MAX_VALUE;
    /** Stop forwarding from clients to the memserver (and so stop reading what they write). */
    private volatile boolean upFrozen;

    public FreezingRelay(InetSocketAddress target) throws IOException {
        super(target);
    }

    /** From now on, forwards only {@code bytes} more from the memserver to its clients. */
    void passDown(long bytes) {
        downBudget = bytes;
    }

    /** Forwards nothing more in either direction, and reads nothing more from either side. */
    public void freeze() {
        upFrozen = true;
        downBudget = 0;
    }

    @Override
    protected void relay(Socket client, Socket server) throws IOException {
        pump(client.getInputStream(), server.getOutputStream(), false);
        pump(server.getInputStream(), client.getOutputStream(), true);
    }

    private void pump(InputStream in, OutputStream out, boolean down) {
        start(down ? "relay-down" : "relay-up", () -> {
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
                    for (int sent = 0; sent < n;) {
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
        });
    }

    private int allowed(boolean down, int wanted) {
        return (int) (down ? Math.min(wanted, downBudget) : upFrozen ? 0 : wanted);
    }
}
