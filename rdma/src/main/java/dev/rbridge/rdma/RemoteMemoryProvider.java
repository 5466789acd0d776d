package dev.rbridge.rdma;

import java.io.IOException;
import java.lang.foreign.MemorySegment;

/** A transport for remote memory: {@code tcp} (pure Java), {@code local} (in-process) and {@code ucx} (JUCX). */
public interface RemoteMemoryProvider {
    String name();

    /** Connects and authenticates, or fails with CONNECT_FAILED, AUTH_FAILED or VERSION_MISMATCH. */
    RemoteConnection connect(ConnectParams params) throws RemoteMemoryException;

    /** Starts serving {@code service} on the address in {@code params}. */
    RemoteListener listen(ListenParams params, RegionService service) throws IOException;

    /**
     * Registers long-lived local memory that data operations will read from and write into, for a transport whose NIC
     * needs registered memory (ucx): registered once here, an operation on it finds the registration instead of making
     * one. The memory must stay allocated until the registration is closed. Transports that need none return
     * {@link LocalRegistration#NONE}; so does ucx when it cannot register (operations then register as before).
     */
    default LocalRegistration registerLocal(MemorySegment memory) {
        return LocalRegistration.NONE;
    }
}
