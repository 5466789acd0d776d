package dev.rbridge.bridge;

import dev.rbridge.nbd.server.BufferPool;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.LocalRegistration;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteListener;
import dev.rbridge.rdma.RemoteMemoryProvider;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The NBD payload blocks are registered with the transport once each, as the pool makes them, and deregistered when
 * the pool frees them; requests register nothing. The provider here only records registrations (registering needs
 * no connection, and no transport records what it registered).
 */
class RegisteredPayloadMemoryTest {
    /** Records registerLocal and the closing of each registration; connects and listens nowhere. */
    private static final class RecordingProvider implements RemoteMemoryProvider {
        final List<MemorySegment> registered = new ArrayList<>();
        final List<MemorySegment> closed = new ArrayList<>();

        @Override
        public String name() {
            return "recording";
        }

        @Override
        public RemoteConnection connect(ConnectParams params) {
            throw new UnsupportedOperationException();
        }

        @Override
        public RemoteListener listen(ListenParams params, RegionService service) {
            throw new UnsupportedOperationException();
        }

        @Override
        public LocalRegistration registerLocal(MemorySegment memory) {
            registered.add(memory);
            return () -> closed.add(memory);
        }
    }

    @Test
    void eachBlockIsRegisteredOnceWhenMadeAndDeregisteredWhenFreed() {
        RecordingProvider provider = new RecordingProvider();
        RegisteredPayloadMemory memory = new RegisteredPayloadMemory(provider);
        BufferPool pool = new BufferPool(1 << 20, 0, memory);
        List<ByteBuffer> held = new ArrayList<>();
        for (int i = 0; i < 1000; i++) { // 1000 requests' worth of 4 KiB buffers, 8 at a time
            held.add(pool.acquire(4096));
            if (held.size() == 8) {
                held.forEach(pool::release);
                held.clear();
            }
        }
        assertEquals(1, provider.registered.size(), "one block, registered once");
        MemorySegment block = provider.registered.get(0);
        assertEquals(BufferPool.BLOCK_BYTES + 4096, block.byteSize(), "a block and a page, for the buffers' offset");
        assertEquals(0, block.address() % 4096, "page aligned");
        assertEquals(1, memory.blocks());
        ByteBuffer b = pool.acquire(4096);
        long at = MemorySegment.ofBuffer(b).address();
        assertTrue(at >= block.address() && at < block.address() + block.byteSize(), "buffers lie in the block");
        pool.release(b);

        pool.trim(); // nothing retained: the idle block goes
        assertEquals(List.of(block), provider.closed, "deregistered when freed");
        assertEquals(0, memory.blocks());
    }
}
