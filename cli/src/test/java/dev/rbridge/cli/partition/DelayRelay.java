package dev.rbridge.cli.partition;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A TCP relay that delays, standing in for netem (which the host kernel lacks): run in a {@link PartitionLab} node as
 * {@code DelayRelay TARGET_HOST TARGET_PORT MILLIS}, it listens on a free port of every address, prints
 * {@code ready PORT}, and forwards each connection it accepts to the target, holding every chunk it reads for
 * {@code MILLIS} ms before writing it on, in each direction and in order (a round trip takes 2 x MILLIS longer). An
 * end of stream is passed on after the data before it; a reset or error closes both sides. A line on stdin with a
 * number sets the delay of every chunk read from then on (and is answered {@code delay N} once it holds); the end of
 * stdin (the test JVM gone) ends the relay. The lab sends the connections to it with an nftables redirect
 * ({@link PartitionLab#delay}).
 */
public final class DelayRelay {
    private static volatile long delayNanos;

    private DelayRelay() {}

    /** One chunk and when it may go on; a chunk of length 0 is the end of the stream. */
    private record Chunk(long dueNanos, byte[] bytes) {
    }

    public static void main(String[] args) throws IOException {
        InetSocketAddress target = new InetSocketAddress(args[0], Integer.parseInt(args[1]));
        delayNanos = TimeUnit.MILLISECONDS.toNanos(Long.parseLong(args[2]));
        ServerSocket server = new ServerSocket(0);
        Thread.ofPlatform().daemon().start(() -> {
            while (true) {
                try {
                    Socket in = server.accept();
                    Thread.ofPlatform().daemon().start(() -> relay(in, target));
                } catch (IOException e) {
                    return;
                }
            }
        });
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        out.println("ready " + server.getLocalPort());
        BufferedReader control = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = control.readLine()) != null;) {
            delayNanos = TimeUnit.MILLISECONDS.toNanos(Long.parseLong(line.strip()));
            out.println("delay " + line.strip());
        }
        System.exit(0);
    }

    private static void relay(Socket client, InetSocketAddress target) {
        Socket upstream = new Socket();
        try {
            upstream.connect(target, 10_000);
            client.setTcpNoDelay(true);
            upstream.setTcpNoDelay(true);
        } catch (IOException e) {
            closeBoth(client, upstream);
            return;
        }
        AtomicInteger ended = new AtomicInteger();
        pump(client, upstream, ended);
        pump(upstream, client, ended);
    }

    /** Two threads for one direction: one reads and stamps chunks, the other writes each when it is due. */
    private static void pump(Socket from, Socket to, AtomicInteger ended) {
        BlockingQueue<Chunk> queue = new LinkedBlockingQueue<>();
        Thread.ofPlatform().daemon().start(() -> {
            byte[] buf = new byte[64 * 1024];
            try {
                InputStream in = from.getInputStream();
                for (int n; (n = in.read(buf)) > 0;) {
                    queue.add(new Chunk(System.nanoTime() + delayNanos, Arrays.copyOf(buf, n)));
                }
                queue.add(new Chunk(System.nanoTime() + delayNanos, new byte[0]));
            } catch (IOException e) {
                closeBoth(from, to);
            }
        });
        Thread.ofPlatform().daemon().start(() -> {
            try {
                OutputStream out = to.getOutputStream();
                while (true) {
                    Chunk c = queue.take();
                    long wait = c.dueNanos - System.nanoTime();
                    if (wait > 0) {
                        TimeUnit.NANOSECONDS.sleep(wait);
                    }
                    if (c.bytes.length == 0) {
                        to.shutdownOutput();
                        if (ended.incrementAndGet() == 2) {
                            closeBoth(from, to); // both ways ended: the connection is over
                        }
                        return;
                    }
                    out.write(c.bytes);
                    out.flush();
                }
            } catch (IOException | InterruptedException e) {
                closeBoth(from, to);
            }
        });
    }

    private static void closeBoth(Socket a, Socket b) {
        try {
            a.close();
        } catch (IOException e) {
            // closing what failed: nothing more to do
        }
        try {
            b.close();
        } catch (IOException e) {
            // as above
        }
    }
}
