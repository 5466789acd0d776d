package dev.rbridge.memserver;

import org.junit.jupiter.api.Tag;
import dev.rbridge.rdma.RemoteMemoryProvider;
import dev.rbridge.rdma.ucx.UcxProvider;

import java.time.Duration;
import java.util.List;

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
        return target(MemServerProcess.start(capacity, TOKEN, "ucx", List.of(), helloTimeout));
    }

    @Override
    boolean deviceHoldsRegisteredMemory() {
        return UcxProvider.registrationsPinPages(); // the memserver runs on this host, in this environment
    }
}
