package dev.rbridge.rdma;

import java.io.IOException;

/** A transport for remote memory: {@code tcp} (pure Java), {@code local} (in-process) and {@code ucx} (JUCX). */
public interface RemoteMemoryProvider {
    String name();

    /** Connects and authenticates, or fails with CONNECT_FAILED, AUTH_FAILED or VERSION_MISMATCH. */
    RemoteConnection connect(ConnectParams params) throws RemoteMemoryException;

    /** Starts serving {@code service} on the address in {@code params}. */
    RemoteListener listen(ListenParams params, RegionService service) throws IOException;
}
