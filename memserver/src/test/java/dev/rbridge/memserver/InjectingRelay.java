package dev.rbridge.memserver;

import dev.rbridge.rdma.TcpRelay;
import dev.rbridge.rdma.wire.MalformedMessageException;
import dev.rbridge.rdma.wire.Message;
import dev.rbridge.rdma.wire.MessageDecoder;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A TCP relay between clients and a real memserver's control port that can hold back what the memserver sends and
 * put bytes of its own in front of it: how a test makes a live memserver's answer to a request wrong (no memserver
 * sends such a thing). Every request that passes up is read with the memserver's decoder, so a test knows the ids its
 * client used. Not a mock: everything else on the wire comes from the memserver.
 */
final class InjectingRelay extends TcpRelay {
    /** A request a client sent through the relay, and the client connection that sent it. */
    record Request(Message message, Downstream from) {
    }

    /** The memserver-to-client direction of one relayed connection. */
    static final class Downstream {
        private final OutputStream out;

        private Downstream(OutputStream out) {
            this.out = out;
        }

        /** Sends {@code bytes} to the client as if the memserver had. */
        void inject(byte[] bytes) throws IOException {
            forward(bytes, bytes.length);
        }

        private void forward(byte[] bytes, int n) throws IOException {
            synchronized (out) {
                out.write(bytes, 0, n);
                out.flush();
            }
        }
    }

    private final BlockingQueue<Request> requests = new LinkedBlockingQueue<>();
    /** Forward nothing from the memserver to its clients (what it sends waits in the relay). */
    private volatile boolean holding;

    InjectingRelay(InetSocketAddress target) throws IOException {
        super(target);
    }

    /** From now on, what the memserver sends stays in the relay: only injected bytes reach the clients. */
    void holdReplies() {
        holding = true;
    }

    /** The next request of type {@code type} a client sends through the relay, waiting up to 10 s for it. */
    Request awaitRequest(Class<? extends Message> type) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (true) {
            Request r = requests.poll(until - System.nanoTime(), TimeUnit.NANOSECONDS);
            if (r == null) {
                throw new AssertionError("no " + type.getSimpleName() + " came through the relay within 10 s");
            }
            if (type.isInstance(r.message())) {
                return r;
            }
        }
    }

    @Override
    protected void relay(Socket client, Socket server) throws IOException {
        Downstream down = new Downstream(client.getOutputStream());
        InputStream clientIn = client.getInputStream();
        OutputStream serverOut = server.getOutputStream();
        InputStream serverIn = server.getInputStream();
        startPump("relay-up", () -> up(clientIn, serverOut, down));
        startPump("relay-down", () -> down(serverIn, down));
    }

    private interface Pump {
        void run() throws IOException, InterruptedException, MalformedMessageException;
    }

    private static void startPump(String name, Pump pump) {
        start(name, () -> {
            try {
                pump.run();
            } catch (IOException | InterruptedException | MalformedMessageException e) {
                // the relay or one side closed, or the client sent what a memserver closes on
            }
        });
    }

    /** Client to memserver: forwarded as it comes, each request noted. */
    private void up(InputStream in, OutputStream out, Downstream from) throws IOException, MalformedMessageException {
        MessageDecoder decoder = MessageDecoder.forMemserver();
        byte[] buf = new byte[64 << 10];
        while (true) {
            int n = in.read(buf);
            if (n < 0) {
                out.close();
                return;
            }
            out.write(buf, 0, n);
            ByteBuffer b = ByteBuffer.wrap(buf, 0, n).order(ByteOrder.LITTLE_ENDIAN);
            Message m;
            while ((m = decoder.next(b)) != null) {
                if (decoder.payloadRemaining() > 0) {
                    decoder.skipPayload(); // WRITE data: not a message
                }
                requests.add(new Request(m, from));
            }
        }
    }

    /** Memserver to client: forwarded as it comes, unless held. */
    private void down(InputStream in, Downstream to) throws IOException, InterruptedException {
        byte[] buf = new byte[64 << 10];
        while (true) {
            int n = in.read(buf);
            if (n < 0) {
                to.out.close();
                return;
            }
            while (holding && !closed()) {
                Thread.sleep(5); // held: its bytes wait here, the client gets only what is injected
            }
            to.forward(buf, n);
        }
    }
}
