package dev.rbridge.rdma;

/**
 * Local memory registered with a transport ({@link RemoteMemoryProvider#registerLocal}); closing it deregisters the
 * memory, after which no data operation may read from it or write into it.
 */
public interface LocalRegistration extends AutoCloseable {
    /** What transports that need no registration return. */
    LocalRegistration NONE = () -> {
    };

    @Override
    void close();
}
