package dev.rbridge.memserver;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.local.LocalProvider;

import java.net.InetSocketAddress;
import java.util.concurrent.ExecutionException;

/**
 * A child JVM's main for {@link MemoryOptionsTest}: starts a memserver with {@code mlock} in this process, asks it for
 * a region of {@code args[0]} bytes and prints what happened on one line: {@code granted} or {@code refused: MESSAGE},
 * then {@code granted-bytes N}. The test starts it with what the process may lock taken away (a low memlock limit, no
 * CAP_IPC_LOCK), so the refusal is the kernel's, whatever the test's own process may do.
 */
final class LockedGrantProbe {
    private LockedGrantProbe() {}

    public static void main(String[] args) throws Exception {
        long size = Long.parseLong(args[0]);
        try (Memserver m = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 1L << 30, "t",
                "local", false, true));
                RemoteConnection c = new LocalProvider().connect(new ConnectParams().address(m.address()).token("t"))) {
            try {
                c.allocate(RegionTag.scratch("locked"), size).get();
                System.out.println("granted");
            } catch (ExecutionException e) {
                System.out.println("refused: " + e.getCause().getMessage());
            }
            System.out.println("granted-bytes " + m.grantedBytes());
        }
    }
}
