package dev.rbridge.rdma.link;

import dev.rbridge.common.tls.PlainSocketStream;
import dev.rbridge.common.tls.SocketStream;

import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLException;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.nio.channels.SocketChannel;

/**
 * The byte stream of one memserver-wire connection: the socket itself, or TLS over it ({@link TlsLink}). Blocking,
 * as the socket is. One thread reads at a time and one writes at a time; reading and writing may overlap. Closing
 * it closes the socket, which wakes a thread blocked in either.
 */
public interface Link extends SocketStream {
    /**
     * Bytes a read would return now without blocking, or more than 0 when it might (TLS: some of a record is here):
     * what a reader polls before it blocks.
     */
    int available() throws IOException;

    /** The plain socket. */
    static Link plain(SocketChannel channel) {
        return new Plain(channel);
    }

    /**
     * A client's link to the memserver at {@code address} over the connected {@code channel}: plain when {@code tls}
     * is null, else TLS after a handshake. An IOException that says in a sentence why the handshake failed, or
     * {@link TlsLink.PlainPeerException} with what the memserver said in clear.
     */
    static Link client(SocketChannel channel, SSLContext tls, InetSocketAddress address) throws IOException {
        if (tls == null) {
            return plain(channel);
        }
        try {
            return TlsLink.client(channel, tls, address);
        } catch (TlsLink.PlainPeerException e) {
            throw e; // what it said in clear is the wire's to read (a refusal, or a memserver without TLS)
        } catch (SSLException e) {
            throw new IOException("TLS handshake failed: " + TlsFailures.explain(e, address.getHostString()), e);
        }
    }

    /** {@link #plain}: every call straight to the socket. */
    final class Plain extends PlainSocketStream implements Link {
        private InputStream stream;

        private Plain(SocketChannel channel) {
            super(channel);
        }

        @Override
        public int available() throws IOException {
            if (stream == null) { // used for available() only; a channel's stream reads nothing by itself
                stream = socket().socket().getInputStream();
            }
            return stream.available();
        }
    }
}
