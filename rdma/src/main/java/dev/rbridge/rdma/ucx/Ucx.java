package dev.rbridge.rdma.ucx;

import dev.rbridge.common.ffm.Libc;
import dev.rbridge.rdma.KeyEnforcement;
import dev.rbridge.rdma.LocalRegistration;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.openucx.jucx.NativeLibs;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.openucx.jucx.ucp.UcpParams;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.net.StandardSocketOptions;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

/**
 * UCX for this JVM: loads JUCX and the system's libucx0 the first time the ucx transport is used (never before: the
 * other transports must run where UCX is not installed), and holds the one {@link UcpContext} every worker is made
 * from, for the life of the JVM. Loading problems become one sentence saying what to install or which transport to
 * use.
 */
final class Ucx {
    private static final Logger log = LoggerFactory.getLogger(Ucx.class);

    /** Transports that exist only on an RDMA device (InfiniBand, RoCE, soft-RoCE). */
    private static final Set<String> RDMA_TLS = Set.of("rc", "rc_v", "rc_verbs", "rc_x", "rc_mlx5", "ud", "ud_v",
            "ud_verbs", "ud_x", "ud_mlx5", "dc", "dc_x", "dc_mlx5", "ib", "rdmacm");
    /**
     * Transports, and UCX's aliases for groups of them, known to register memory without pinning it to a device:
     * sockets, loopback and shared memory copy through the page tables. Any other name counts as pinning.
     */
    private static final Set<String> UNPINNED_TLS = Set.of("tcp", "self", "sm", "shm", "mm", "posix", "sysv", "cma",
            "knem", "xpmem");

    /**
     * How the memserver's context registers memory with an InfiniBand/RoCE device unless UCX_IB_REG_METHODS says
     * otherwise: each registration its own {@code ibv_reg_mr}, each deregistration an {@code ibv_dereg_mr}. UCX's
     * default ("rcache,odp,direct") keeps a deregistered memory region, and its rkey, alive in a registration cache
     * until the memory is unmapped, so withdrawing a key would change nothing on the NIC and a MAP after a key
     * rotation would hand out the same rkey again.
     */
    static final String SERVER_REG_METHODS = "direct";
    /** How often UCX checks that the peer of an endpoint is still there, unless UCX_KEEPALIVE_INTERVAL says. */
    static final String KEEPALIVE_INTERVAL = "2s";

    /** The clients' context; the memserver's ({@link #serverContext}) registers memory differently. */
    private static UcpContext context;
    private static UcpContext serverContext;
    /** Whether the server context's registrations are each their own region on an RDMA NIC, as UCX opened it. */
    private static KeyEnforcement serverKeys;
    private static boolean loaded;
    /** Whether {@link #keepOffJvmSignals} set UCX_ERROR_SIGNALS (System.getenv does not see what setenv sets). */
    private static boolean signalsKept;
    private static RemoteMemoryException failure;
    private static Path laneLog;
    private static final AtomicLong registrationFailures = new AtomicLong();
    /** Where the clients' GETs and PUTs go zero-copy on an RDMA NIC (UCX_ZCOPY_THRESH overrides it). */
    static final String CLIENT_ZCOPY_THRESH = "4096";

    private Ucx() {}

    /** The context clients make workers from, created on first use; fails with CONNECT_FAILED and what to do. */
    static synchronized UcpContext context() throws RemoteMemoryException {
        if (context == null) {
            context = newContext(false);
        }
        return context;
    }

    /**
     * Registers client memory (the NBD payload blocks) in the clients' context, so a GET or PUT on it finds the
     * registration in UCX's cache instead of registering on the operation's path. When UCX cannot load there is no
     * connection to move data either: the memory stays unregistered, said in the log (the 1st, 2nd, 4th ... time).
     */
    static LocalRegistration registerLocal(MemorySegment memory) {
        UcpMemory registered;
        try {
            registered = context().memoryMap(new UcpMemMapParams().setAddress(memory.address())
                    .setLength(memory.byteSize()));
        } catch (RemoteMemoryException | RuntimeException e) {
            long failures = registrationFailures.incrementAndGet();
            if (Long.bitCount(failures) == 1) { // the 1st, 2nd, 4th, 8th...
                log.warn("payload memory could not be registered with UCX ({}; {} time(s) so far); data operations "
                        + "register it as they go (a memlock limit too low? see docs/transports.md)", e.getMessage(),
                        failures);
            }
            return LocalRegistration.NONE;
        }
        return registered::deregister; // holds the UcpMemory, which JUCX does not keep alive on its own
    }

    /**
     * The context the memserver registers region memory in and serves from: as {@link #context}, with registrations
     * the NIC really forgets when they go ({@link #SERVER_REG_METHODS}).
     */
    static synchronized UcpContext serverContext() throws RemoteMemoryException {
        if (serverContext == null) {
            serverContext = newContext(true);
        }
        return serverContext;
    }

    /**
     * Whether the NIC refuses the remote keys of the memserver context's registrations once they are deregistered,
     * read from UCX as it opened the context ({@link UcxKeyCheck#context}): the memory domains and transports it
     * opened, and the IB memory domain's registration methods in effect then (the environment, ucx.conf, UCX's
     * default, or this class's {@link #SERVER_REG_METHODS}). Whether a client's GETs and PUTs use them is the
     * endpoint's business ({@link UcxKeyCheck#endpoint}).
     */
    static synchronized KeyEnforcement serverKeys() throws RemoteMemoryException {
        serverContext();
        return serverKeys;
    }

    private static UcpContext newContext(boolean server) throws RemoteMemoryException {
        if (failure != null) {
            throw failure;
        }
        try {
            load();
            // The memserver registers, packs keys and deregisters on a thread of its own while its progress thread
            // serves, and a client registers payload memory (registerLocal) from NBD threads while each connection's
            // worker runs on its own thread: with this UCX locks the context's functions (ucp_mem_map, ...).
            UcpParams params = new UcpParams().requestRmaFeature().requestWakeupFeature().setMtWorkersShared(true);
            if (System.getenv("UCX_KEEPALIVE_INTERVAL") == null) {
                // A peer whose endpoint went (a memserver closing a client it disconnected or fenced, a process
                // killed) is noticed by the other side's keepalive; where UCX emulates GET and PUT nothing else
                // stops a cut-off client's traffic, and UCX's 20 s default is longer than anyone should wait.
                params.setConfig("KEEPALIVE_INTERVAL", KEEPALIVE_INTERVAL);
            }
            if (!server && System.getenv("UCX_ZCOPY_THRESH") == null
                    && registrationPinsPages(System.getenv(), rdmaDevices())) {
                // The NIC reads and writes the NBD payload buffers in place from 4 KiB up: they are registered
                // once (registerLocal), so a 4 KiB operation costs no copy into UCX's bounce buffer and no
                // registration. UCX's own threshold is higher because it assumes memory registered on demand.
                params.setConfig("ZCOPY_THRESH", CLIENT_ZCOPY_THRESH);
            }
            // UCX 1.13 does not apply UcpParams.setConfig to the IB memory domain's settings (the key is kept, then
            // reported unused), so the setting goes through the environment, which UCX reads as the context opens its
            // memory domains, and only for this context: the variable is removed again once it is made.
            boolean direct = server && System.getenv("UCX_IB_REG_METHODS") == null && !rdmaDevices().isEmpty();
            if (direct) {
                setenvOrWarn("UCX_IB_REG_METHODS", SERVER_REG_METHODS);
            }
            try {
                UcpContext made = new UcpContext(params);
                if (server) {
                    serverKeys = keyCheck(made); // while UCX_IB_REG_METHODS is as the context saw it
                }
                return made;
            } catch (LinkageError e) {
                throw new RemoteMemoryException(Status.CONNECT_FAILED, loadFailure(e));
            } catch (RuntimeException e) {
                throw new RemoteMemoryException(Status.CONNECT_FAILED, "UCX could not start (" + e.getMessage()
                        + "); check UCX_TLS and UCX_NET_DEVICES (ucx_info -d lists what this host has), "
                        + "or use --transport tcp");
            } finally {
                if (direct) {
                    unsetenv("UCX_IB_REG_METHODS");
                }
            }
        } catch (RemoteMemoryException e) {
            failure = e;
            throw e;
        }
    }

    /** What UCX says of {@code context}'s keys; when UCX cannot say, not enforced (and why). */
    private static KeyEnforcement keyCheck(UcpContext context) {
        try {
            return UcxKeyCheck.context(UcxInfo.contextInfo(context), UcxInfo.ibRegMethods());
        } catch (RuntimeException | LinkageError e) {
            log.warn("cannot read UCX's configuration to tell whether withdrawn remote keys are enforced: {}",
                    e.toString());
            return new KeyEnforcement(false, "UCX's configuration could not be read (" + e.getMessage() + ")");
        }
    }

    /**
     * Keeps UCX's own SIGSEGV, SIGBUS, SIGILL and SIGFPE handlers out of this JVM, which relies on its own (an implicit
     * null check in compiled code is a SIGSEGV the JVM handles): UCX installs them as libucs loads, unless
     * UCX_ERROR_SIGNALS is empty, so this must run before anything opens a UCX library, JUCX's or a lookup's. With
     * UCX's handler in place the JVM dies of the next such fault ("SIGSEGV ... sent by kill"). Idempotent.
     */
    static synchronized void keepOffJvmSignals() {
        if (System.getenv("UCX_ERROR_SIGNALS") != null || signalsKept) {
            return;
        }
        try {
            setenv("UCX_ERROR_SIGNALS", "");
            signalsKept = true;
        } catch (Throwable e) {
            log.warn("could not set UCX_ERROR_SIGNALS; set it empty in the environment", e);
        }
    }

    /** Loads JUCX and libucx0 once, after checking what UCX_TLS asks for is here. */
    private static void load() throws RemoteMemoryException {
        if (loaded) {
            return;
        }
        checkRdmaDevice(System.getenv(), rdmaDevices());
        keepOffJvmSignals();
        try {
            NativeLibs.load();
        } catch (LinkageError e) {
            throw new RemoteMemoryException(Status.CONNECT_FAILED, loadFailure(e));
        }
        if (rdmaDevices().isEmpty()) {
            log.info("no RDMA device on this host: UCX will move data over its tcp or shared-memory transports, "
                    + "not RDMA");
        }
        loaded = true;
    }

    /** The message for a JUCX or libucx0 that would not load. */
    static String loadFailure(Throwable e) {
        String m = String.valueOf(e.getMessage());
        if (m.contains("libuc") || m.contains("cannot open shared object")) {
            return "the ucx transport needs UCX 1.13 or newer (libucp.so.0 could not be loaded: " + m.trim()
                    + "); install it with 'apt-get install libucx0' (Debian 12), or use --transport tcp";
        }
        return "the ucx transport could not load JUCX's native library (" + m.trim() + "); install libucx0 "
                + "('apt-get install libucx0'), or use --transport tcp";
    }

    /** The RDMA devices this host has (/sys/class/infiniband), empty when none. */
    static List<String> rdmaDevices() {
        Path dir = Path.of("/sys/class/infiniband");
        if (!Files.isDirectory(dir)) {
            return List.of();
        }
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).sorted().toList();
        } catch (IOException e) {
            return List.of();
        }
    }

    /**
     * Refuses to start when UCX_TLS (or UCX_NET_DEVICES) asks for RDMA and the host has no RDMA device: UCX itself
     * would fail later with "no such device" or quietly fall back.
     */
    static void checkRdmaDevice(Map<String, String> env, List<String> devices) throws RemoteMemoryException {
        if (!devices.isEmpty()) {
            return;
        }
        String tls = env.getOrDefault("UCX_TLS", "").trim().toLowerCase(Locale.ROOT);
        List<String> wanted = new ArrayList<>();
        if (!tls.startsWith("^")) {
            for (String t : tls.split(",")) {
                String name = transportName(t);
                if (RDMA_TLS.contains(name)) {
                    wanted.add(name);
                }
            }
        }
        String nets = env.getOrDefault("UCX_NET_DEVICES", "");
        for (String d : nets.split(",")) {
            if (d.trim().matches("[A-Za-z0-9_]+:\\d+")) { // mlx5_0:1, rxe0:1: an RDMA port
                wanted.add(d.trim());
            }
        }
        if (!wanted.isEmpty()) {
            throw new RemoteMemoryException(Status.CONNECT_FAILED, "no RDMA device on this host (/sys/class/"
                    + "infiniband is empty) but " + (tls.isEmpty() ? "UCX_NET_DEVICES=" + nets : "UCX_TLS=" + tls)
                    + " asks for one; load soft-RoCE (see kmod-hooks) or use an RDMA NIC, set UCX_TLS=tcp, or use "
                    + "--transport tcp");
        }
    }

    /**
     * Whether a UCX registration of memory in this process pins its pages to an RDMA NIC, as {@code ibv_reg_mr} does:
     * the host has an RDMA device and UCX may use it, going by UCX_TLS (unset, "all", an exclusion list, or a list
     * naming any transport but those known not to pin, {@link #UNPINNED_TLS}) and UCX_NET_DEVICES (unset, "all", or
     * naming an RDMA port). Otherwise UCX moves data with its tcp or shared-memory transports, which emulate GET and
     * PUT with copies through the page tables and pin nothing. When unsure it says yes: filling a range with zeroes
     * where its pages could have gone back costs RAM, giving pages back under a NIC would lose data.
     */
    static boolean registrationPinsPages(Map<String, String> env, List<String> devices) {
        if (devices.isEmpty()) {
            return false;
        }
        String tls = env.getOrDefault("UCX_TLS", "").trim().toLowerCase(Locale.ROOT);
        boolean rdmaTls = tls.isEmpty() || tls.startsWith("^"); // every transport, or all but some
        for (String t : tls.split(",")) {
            String name = transportName(t);
            rdmaTls |= !name.isEmpty() && !UNPINNED_TLS.contains(name);
        }
        String nets = env.getOrDefault("UCX_NET_DEVICES", "").trim();
        boolean rdmaDevice = nets.isEmpty() || nets.equals("all");
        for (String d : nets.split(",")) {
            rdmaDevice |= d.trim().matches("[A-Za-z0-9_]+:\\d+"); // mlx5_0:1, rxe0:1: an RDMA port
        }
        return rdmaTls && rdmaDevice;
    }

    /** A UCX_TLS entry's transport: without a leading backslash (a name, not an alias) or a ":aux" suffix. */
    private static String transportName(String entry) {
        String name = entry.trim();
        if (name.startsWith("\\")) {
            name = name.substring(1);
        }
        int colon = name.indexOf(':');
        return colon < 0 ? name : name.substring(0, colon);
    }

    /**
     * Makes UCX log the transports it picks for each endpoint ("lanes") to a file that {@link #lanes} reads, unless
     * the user already chose a log level or file. Only works before UCX is loaded (UCX reads its log settings then);
     * returns false when it is too late.
     */
    static synchronized boolean reportLanes() {
        if (loaded || laneLog != null) {
            return laneLog != null;
        }
        try {
            if (System.getenv("UCX_LOG_FILE") == null) {
                laneLog = Files.createTempFile("rbridge-ucx-", ".log");
                laneLog.toFile().deleteOnExit();
                setenv("UCX_LOG_FILE", laneLog.toString());
            } else {
                laneLog = Path.of(System.getenv("UCX_LOG_FILE").replace("%p",
                        String.valueOf(ProcessHandle.current().pid())));
            }
            if (System.getenv("UCX_LOG_LEVEL") == null) {
                setenv("UCX_LOG_LEVEL", "info");
            }
            return true;
        } catch (Throwable e) {
            log.debug("cannot set up the UCX lane report", e);
            return false;
        }
    }

    /** The endpoint configurations UCX logged ("ep_cfg[..]: tag(tcp/lo) rma_am(tcp/lo)" and the like). */
    static List<String> lanes() {
        Path p = laneLog;
        if (p == null) {
            return List.of();
        }
        flushLog();
        if (!Files.exists(p)) {
            return List.of();
        }
        try {
            List<String> out = new ArrayList<>();
            for (String line : Files.readAllLines(p)) {
                int at = line.indexOf("ep_cfg[");
                if (at >= 0 && !out.contains(line.substring(at).trim())) {
                    out.add(line.substring(at).trim());
                }
            }
            return out;
        } catch (IOException e) {
            return List.of();
        }
    }

    /** UCX flushes its log file only for errors: flush it so the lanes are there to read. */
    private static void flushLog() {
        try {
            Linker linker = Linker.nativeLinker();
            MemorySegment f = SymbolLookup.libraryLookup("libucs.so.0", Arena.global()).find("ucs_log_flush")
                    .orElseThrow();
            linker.downcallHandle(f, FunctionDescriptor.ofVoid()).invokeExact();
        } catch (Throwable e) {
            log.debug("cannot flush UCX's log", e);
        }
    }

    private static void setenvOrWarn(String name, String value) {
        try {
            setenv(name, value);
        } catch (Throwable e) {
            log.warn("could not set {}={} for the memserver's UCX context; set it in the environment", name, value, e);
        }
    }

    private static void unsetenv(String name) {
        try {
            setenv(name, null);
        } catch (Throwable e) {
            log.warn("could not unset {}", name, e);
        }
    }

    /** libc's setenv (overwriting), or unsetenv when {@code value} is null: what UCX reads, unlike System.getenv. */
    static void setenv(String name, String value) throws Throwable {
        try (Arena a = Arena.ofConfined()) {
            int rc;
            if (value == null) {
                rc = (int) Libc.downcallWithoutErrno("unsetenv",
                        FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS))
                        .invokeExact(a.allocateFrom(name));
            } else {
                rc = (int) Libc.downcallWithoutErrno("setenv", FunctionDescriptor.of(ValueLayout.JAVA_INT,
                        ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_INT))
                        .invokeExact(a.allocateFrom(name), a.allocateFrom(value), 1);
            }
            if (rc != 0) {
                throw new IOException((value == null ? "unsetenv " : "setenv ") + name + " failed");
            }
        }
    }

    /** The control connection's socket, either end: small messages, sent at once; a vanished peer found eventually. */
    static void tuneControlSocket(SocketChannel ch) throws IOException {
        ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
        ch.setOption(StandardSocketOptions.SO_KEEPALIVE, true);
    }

    /** A UCX status code as the exception of the contract: the peer is gone or the endpoint broke. */
    static RemoteMemoryException failure(String what, String peer, int ucsStatus, String message) {
        return new RemoteMemoryException(Status.CONNECTION_LOST, what + " to memserver " + peer + " failed in UCX: "
                + message + " (status " + ucsStatus + ")");
    }
}
