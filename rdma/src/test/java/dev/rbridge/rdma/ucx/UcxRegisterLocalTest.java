package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.LocalRegistration;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;

/**
 * {@link UcxProvider#registerLocal} over UCX's tcp transport: memory registered in the clients' context (as the
 * bridge registers its NBD payload blocks) is written from and read into like any other, slices of it included, and
 * its registration closes; a registration is a real one, not {@link LocalRegistration#NONE}.
 */
@Timeout(120)
class UcxRegisterLocalTest {
    private UcxLoopback loopback;

    @AfterEach
    void tearDown() {
        if (loopback != null) {
            loopback.close();
        }
    }

    @Test
    void registeredPayloadMemoryCarriesReadsAndWritesAndDeregisters() throws Exception {
        loopback = new UcxLoopback("register");
        UcxProvider provider = new UcxProvider();
        try (RemoteConnection c = loopback.connect("register");
                Arena arena = Arena.ofShared()) {
            MemorySegment block = arena.allocate(2 << 20, 4096);
            LocalRegistration registration = provider.registerLocal(block);
            assertNotSame(LocalRegistration.NONE, registration, "UCX registered the block");
            RegionDescriptor r = c.allocate(RegionTag.scratch("register"), 1 << 20).get(30, TimeUnit.SECONDS);
            MemorySegment src = block.asSlice(8192, 64 << 10);
            MemorySegment dst = block.asSlice(1 << 20, 64 << 10);
            for (long i = 0; i < src.byteSize(); i++) {
                src.set(ValueLayout.JAVA_BYTE, i, (byte) (i * 13 + 5));
            }
            c.write(r, 4096, src).get(30, TimeUnit.SECONDS);
            c.read(r, 4096, dst).get(30, TimeUnit.SECONDS);
            assertArrayEquals(src.toArray(ValueLayout.JAVA_BYTE), dst.toArray(ValueLayout.JAVA_BYTE));
            registration.close();
            // Unregistered again, the memory still works as any caller's memory does (UCX registers on its own).
            dst.fill((byte) 0);
            c.read(r, 4096, dst).get(30, TimeUnit.SECONDS);
            assertArrayEquals(src.toArray(ValueLayout.JAVA_BYTE), dst.toArray(ValueLayout.JAVA_BYTE));
        }
    }
}
