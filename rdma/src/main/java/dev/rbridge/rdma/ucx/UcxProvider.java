package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.LocalRegistration;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteListener;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryProvider;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.util.List;

/**
 * Remote memory over UCX (JUCX 1.12.1 on the system's libucx0): one-sided GET/PUT on registered region memory, RDMA
 * READ/WRITE on InfiniBand or RoCE, emulated by UCX over its tcp transport elsewhere. The control plane is the control
 * protocol of {@code dev.rbridge.rdma.wire} on a TCP connection, with its UCX opcodes (UCX_CONNECT, MAP, INVALIDATE).
 * UCX is loaded only when this provider connects or listens for the first time.
 */
public final class UcxProvider implements RemoteMemoryProvider {
    @Override
    public String name() {
        return "ucx";
    }

    @Override
    public RemoteConnection connect(ConnectParams params) throws RemoteMemoryException {
        return UcxConnection.connect(params);
    }

    @Override
    public RemoteListener listen(ListenParams params, RegionService service) throws IOException {
        return UcxListener.start(params, service);
    }

    @Override
    public LocalRegistration registerLocal(MemorySegment memory) {
        return Ucx.registerLocal(memory);
    }

    /**
     * Asks UCX to report the transports it chooses per endpoint; call before the first connection (UCX reads its log
     * settings when it loads). False when it is too late or impossible.
     */
    public static boolean reportLanes() {
        return Ucx.reportLanes();
    }

    /**
     * Whether memory a ucx memserver registers in this environment is held by an RDMA NIC (see {@link
     * dev.rbridge.rdma.RegionService.Pin#heldByDevice}): this host has an RDMA device and UCX_TLS and UCX_NET_DEVICES
     * let UCX use it.
     */
    public static boolean registrationsPinPages() {
        return Ucx.registrationPinsPages(System.getenv(), Ucx.rdmaDevices());
    }

    /** What UCX reported so far: lines like {@code ep_cfg[1]: tag(tcp/lo) rma_am(tcp/lo)}. */
    public static List<String> lanes() {
        return Ucx.lanes();
    }
}
