package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.TcpRelay;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;

/**
 * A TCP relay for control connections that, once {@linkplain #hold held}, forwards nothing more and keeps the client's
 * side open whatever the memserver does, closing included: the client learns nothing over its control connection, as
 * behind a partition of that one port. What then stops the client's UCX traffic is the memserver's business.
 */
final class HoldingRelay extends TcpRelay {
    private volatile boolean held;

    HoldingRelay(InetSocketAddress target) throws IOException {
        super(target);
    }

    /** From now on nothing passes, in either direction, and an end of the memserver's side goes unseen. */
    void hold() {
        held = true;
    }

    @Override
    protected void relay(Socket client, Socket server) throws IOException {
        pump(client.getInputStream(), server.getOutputStream());
        pump(server.getInputStream(), client.getOutputStream());
    }

    private void pump(InputStream in, OutputStream out) {
        start("holding-relay", () -> {
            byte[] buf = new byte[64 << 10];
            try {
                int n;
                while ((n = in.read(buf)) >= 0) {
                    if (!held) {
                        out.write(buf, 0, n);
                    }
                }
                if (!held) {
                    out.close();
                }
            } catch (IOException e) {
                // a side closed, or the relay did
            }
        });
    }
}
