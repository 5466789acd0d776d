package dev.rbridge.rdma;

import java.net.InetSocketAddress;

/** A listening endpoint of a provider. Closing it stops accepting and closes every client connection. */
public interface RemoteListener extends AutoCloseable {
    InetSocketAddress address();

    int connectionCount();

    @Override
    void close();
}
