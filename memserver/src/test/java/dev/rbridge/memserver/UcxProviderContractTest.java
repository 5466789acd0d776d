package dev.rbridge.memserver;

import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.ucx.UcxProvider;
import dev.rbridge.rdma.wire.Message;

import java.lang.foreign.Arena;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The provider contract over the ucx provider (JUCX), the memserver in its own JVM (killed and frozen for real), with
 * UCX_TLS=tcp on both sides: UCX emulates GET/PUT with active messages there, which is what this host can run.
 */
@Tag("fault")
class UcxProviderContractTest extends ProviderContractTest {
    @Override
    RemoteMemoryProvider provider() {
        return new UcxProvider();
    }

    @Override
    Target start(long capacity, Duration helloTimeout) throws Exception {
        return target(MemserverProcess.start(capacity, TOKEN, "ucx", List.of(), helloTimeout));
    }

    @Override
    boolean deviceHoldsRegisteredMemory() {
        return UcxProvider.registrationsPinPages(); // the memserver runs on this host, in this environment
    }

    /**
     * A control reply carrying the id of a data operation (a GET, which no reply answers) closes the connection, and
     * the GET fails once UCX has let go of its buffer; the memserver is frozen, so UCX cannot complete it meanwhile.
     * It used to be taken off the waiting operations by the bad reply, and then missed by the close for ever.
     */
    @Test
    void aControlReplyToADataOperationFailsItPromptly() throws Exception {
        try (Target frozen = start(64L << 20);
                InjectingRelay relay = new InjectingRelay(frozen.address());
                RemoteConnection c = connect(relay, TOKEN, Duration.ofMinutes(2));
                Arena arena = Arena.ofShared()) {
            RegionDescriptor r = c.allocate(RegionTag.scratch("frozen"), 1 << 20).get(30, TimeUnit.SECONDS);
            c.info().get(30, TimeUnit.SECONDS);
            InjectingRelay.Request info = relay.awaitRequest(Message.Info.class);
            frozen.freeze();
            try {
                CompletableFuture<Void> read = c.read(r, 0, arena.allocate(4096)); // its GET takes the next id
                info.from().inject(withData(new Message.WriteReply(info.message().id() + 1), 0));
                RemoteMemoryException e = failure(read, Duration.ofSeconds(10));
                assertEquals(Status.CONNECTION_LOST, e.status(), e.getMessage());
                assertTrue(e.getMessage().contains("reply to data operation"), e.getMessage());
            } finally {
                frozen.thaw();
            }
        }
    }
}
