package dev.rbridge.ops.http;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.Locale;

/** A byte-level HTTP client for tests: sends exactly what it is told and reads answers by Content-Length. */
final class RawHttp implements AutoCloseable {
    final Socket socket;
    private final InputStream in;

    record Answer(int status, String head, String body) {
        String header(String name) {
            for (String line : head.split("\r\n")) {
                int colon = line.indexOf(':');
                if (colon > 0 && line.substring(0, colon).equalsIgnoreCase(name)) {
                    return line.substring(colon + 1).trim();
                }
            }
            return null;
        }
    }

    RawHttp(InetSocketAddress server) throws IOException {
        this(server, null);
    }

    /** @param from a local address to connect from (another loopback address: another peer), or null */
    RawHttp(InetSocketAddress server, String from) throws IOException {
        socket = new Socket();
        if (from != null) {
            socket.bind(new InetSocketAddress(from, 0));
        }
        socket.connect(server, 5000);
        socket.setSoTimeout(10_000);
        in = socket.getInputStream();
    }

    RawHttp send(String text) throws IOException {
        socket.getOutputStream().write(text.getBytes(StandardCharsets.ISO_8859_1));
        socket.getOutputStream().flush();
        return this;
    }

    /** One answer; throws when the server closed first. */
    Answer read() throws IOException {
        return read(false);
    }

    /** One answer to a HEAD request: its Content-Length announces a body that is not sent. */
    Answer readHead() throws IOException {
        return read(true);
    }

    private Answer read(boolean headOnly) throws IOException {
        ByteArrayOutputStream head = new ByteArrayOutputStream();
        int matched = 0;
        while (matched < 4) {
            int b = in.read();
            if (b < 0) {
                throw new IOException("closed after " + head.size() + " bytes of an answer: " + head);
            }
            head.write(b);
            matched = (b == (matched % 2 == 0 ? '\r' : '\n')) ? matched + 1 : (b == '\r' ? 1 : 0);
        }
        String h = head.toString(StandardCharsets.ISO_8859_1);
        int status = Integer.parseInt(h.substring(9, 12));
        Answer a = new Answer(status, h, "");
        String length = a.header("Content-Length");
        byte[] body = in.readNBytes(length == null || headOnly ? 0 : Integer.parseInt(length));
        return new Answer(status, h, new String(body, StandardCharsets.UTF_8));
    }

    /** Some bytes of what arrived (at most {@code b.length}); -1 at the end of the stream. */
    int readSome(byte[] b) throws IOException {
        return in.read(b);
    }

    /** Reads until the server closes (end of stream or reset); returns how many bytes came. */
    long readToClose() throws IOException {
        byte[] b = new byte[64 << 10];
        long total = 0;
        try {
            for (int n; (n = in.read(b)) >= 0;) {
                total += n;
            }
        } catch (IOException e) {
            if (e instanceof SocketTimeoutException || e.getMessage() == null
                    || !e.getMessage().toLowerCase(Locale.ROOT).contains("reset")) {
                throw e;
            }
        }
        return total;
    }

    Answer get(String path) throws IOException {
        return send("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").read();
    }

    /** True when the server closed the connection (EOF or reset) within the socket timeout. */
    boolean closedByServer() throws IOException {
        try {
            while (true) {
                if (in.read() < 0) {
                    return true;
                }
            }
        } catch (SocketTimeoutException e) {
            return false;
        } catch (IOException e) {
            return e.getMessage() != null && e.getMessage().toLowerCase(Locale.ROOT).contains("reset");
        }
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
