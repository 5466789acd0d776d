package dev.rbridge.bridge;

import dev.rbridge.nbd.server.PayloadMemory;
import dev.rbridge.rdma.LocalRegistration;
import dev.rbridge.rdma.RemoteMemoryProvider;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.IdentityHashMap;
import java.util.Map;

/**
 * The NBD server's payload blocks, each registered with the bridge's transport when it is made
 * ({@link RemoteMemoryProvider#registerLocal}): a transport that moves data straight from and into payload buffers
 * (ucx, through the NIC) then never registers memory on a request's path. Blocks are made and freed rarely (see
 * {@code BufferPool}), so one lock is enough.
 */
public final class RegisteredPayloadMemory implements PayloadMemory {
    private final RemoteMemoryProvider provider;
    private final Map<ByteBuffer, LocalRegistration> registrations = new IdentityHashMap<>();

    public RegisteredPayloadMemory(RemoteMemoryProvider provider) {
        this.provider = provider;
    }

    @Override
    public ByteBuffer allocate(int bytes) {
        ByteBuffer block = PayloadMemory.DIRECT.allocate(bytes);
        LocalRegistration registration = provider.registerLocal(MemorySegment.ofBuffer(block));
        synchronized (registrations) {
            registrations.put(block, registration);
        }
        return block;
    }

    @Override
    public void free(ByteBuffer block) {
        LocalRegistration registration;
        synchronized (registrations) {
            registration = registrations.remove(block);
        }
        if (registration != null) {
            registration.close();
        }
    }

    /** Blocks registered and not yet freed. */
    public int blocks() {
        synchronized (registrations) {
            return registrations.size();
        }
    }
}
