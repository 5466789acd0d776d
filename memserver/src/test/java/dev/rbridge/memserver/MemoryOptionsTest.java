package dev.rbridge.memserver;

import dev.rbridge.memory.SwapSafety;
import dev.rbridge.rdma.ChildJvm;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.local.LocalProvider;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.ExecutionException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Huge pages and mlock: what the system grants works, what it refuses is refused with the reason. */
class MemoryOptionsTest {
    private static Memserver start(boolean hugePages, boolean mlock) throws Exception {
        return Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 1L << 30, "t", "local",
                hugePages, mlock));
    }

    private static RemoteConnection connect(Memserver m) throws RemoteMemoryException {
        return new LocalProvider().connect(new ConnectParams().address(m.address()).token("t"));
    }

    private static long hugePagesFree() throws Exception {
        for (String line : Files.readAllLines(Path.of("/proc/meminfo"))) {
            if (line.startsWith("HugePages_Free:")) {
                return Long.parseLong(line.replaceAll("\\D", ""));
            }
        }
        return 0;
    }

    private static long statusKiB(String field) throws Exception {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith(field + ":")) {
                return Long.parseLong(line.replaceAll("\\D", ""));
            }
        }
        throw new AssertionError("no " + field + " in /proc/self/status");
    }

    @Test
    void hugePagesWithAnEmptyPoolAreRefusedWithTheReason() throws Exception {
        Assumptions.assumeTrue(hugePagesFree() == 0, "this host has huge pages; the refusal cannot be provoked");
        try (Memserver m = start(true, false); RemoteConnection c = connect(m)) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> c.allocate(RegionTag.scratch("huge"), 4 << 20).get());
            RemoteMemoryException cause = (RemoteMemoryException) e.getCause();
            assertEquals(RemoteMemoryException.Status.NO_CAPACITY, cause.status());
            assertTrue(cause.getMessage().contains("vm.nr_hugepages"), cause.getMessage());
            assertEquals(0, m.grantedBytes(), "a refused grant costs nothing");
        }
    }

    /** Whether this process may lock {@code bytes} more: CAP_IPC_LOCK, or room under RLIMIT_MEMLOCK's soft limit. */
    private static boolean mayLock(long bytes) throws Exception {
        if (SwapSafety.hasEffectiveCapability(SwapSafety.CAP_IPC_LOCK)) {
            return true; // the limit does not apply
        }
        for (String line : Files.readAllLines(Path.of("/proc/self/limits"))) {
            if (line.startsWith("Max locked memory")) {
                String soft = line.substring("Max locked memory".length()).trim().split("\\s+")[0];
                return soft.equals("unlimited") || Long.parseLong(soft) - statusKiB("VmLck") * 1024 >= bytes;
            }
        }
        throw new AssertionError("no 'Max locked memory' in /proc/self/limits");
    }

    /**
     * Allowed by this host (predicted first, so a refusal cannot pass for it): the region is locked as it is touched
     * and works. Where the host refuses, {@link #aGrantTheKernelWillNotLockIsRefusedWithTheReason} covers the refusal
     * anyway, so this one is skipped with the reason.
     */
    @Test
    void lockedRegionsAreLockedAsTheyAreTouched() throws Exception {
        long size = 64L << 20;
        Assumptions.assumeTrue(mayLock(size), "this process may not lock " + size + " bytes (no CAP_IPC_LOCK, "
                + "memlock limit too low): nothing to lock here; the refusal is tested in a child without either");
        try (Memserver m = start(false, true); RemoteConnection c = connect(m); Arena arena = Arena.ofShared()) {
            long lockedBefore = statusKiB("VmLck");
            long residentBefore = statusKiB("VmRSS");
            RegionDescriptor r = c.allocate(RegionTag.scratch("locked"), size).get();
            assertTrue(statusKiB("VmLck") - lockedBefore >= size >> 10, "the region is locked");
            assertTrue(statusKiB("VmRSS") - residentBefore < 32 << 10,
                    "locking on fault does not make the region resident up front");
            MemorySegment src = arena.allocate(8 << 20).fill((byte) 9);
            c.write(r, 0, src).get();
            MemorySegment dst = arena.allocate(8 << 20);
            c.read(r, 0, dst).get();
            assertEquals(-1, src.mismatch(dst));
        }
    }

    /**
     * The refusal, on every host: a memserver in a child JVM whose memlock limit is 1 MiB ({@code prlimit}) and, where
     * this process holds CAP_IPC_LOCK (root), without it ({@code setpriv} takes it out of the bounding set), so the
     * kernel refuses the lock for real. The grant fails, says it was the memlock limit, and costs nothing.
     */
    @Test
    void aGrantTheKernelWillNotLockIsRefusedWithTheReason() throws Exception {
        long size = 64L << 20;
        List<String> cmd = new ArrayList<>(List.of("prlimit", "--memlock=1048576:1048576"));
        if (SwapSafety.hasEffectiveCapability(SwapSafety.CAP_IPC_LOCK)) {
            cmd.addAll(List.of("setpriv", "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", "--"));
        }
        cmd.addAll(ChildJvm.command(List.of(), LockedGrantProbe.class, List.of(String.valueOf(size))));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "the probe did not end: " + out);
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("refused: ") && out.contains("memlock limit"),
                "a grant the kernel will not lock must be refused with the reason: " + out);
        assertTrue(out.contains("granted-bytes 0"), "a refused grant costs nothing: " + out);
    }
}
