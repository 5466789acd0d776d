package dev.rbridge.cli.history;

import java.io.Closeable;
import java.io.IOException;

/**
 * Where {@link VersionedWorkload} reads and writes: one connection to a block device (an NBD export), used by one
 * thread at a time. An operation that fails throws IOException, and the target may then reconnect for the next one.
 * {@link LibnbdTarget} is the real one.
 */
public interface BlockTarget extends Closeable {
    /** Writes {@code data} at byte {@code offset}; returns once the device acknowledged it. */
    void write(long offset, byte[] data) throws IOException;

    /** Reads {@code length} bytes at byte {@code offset}. */
    byte[] read(long offset, int length) throws IOException;

    /** Closes the connection; never throws. */
    @Override
    void close();

    /** Opens a new target (a new connection); the workload opens one per thread. */
    @FunctionalInterface
    interface Connector {
        BlockTarget connect() throws IOException;
    }
}
