package dev.rbridge.kmod.attach;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/**
 * Hands NBD connections to the kernel: connect and handshake N sockets to an export, give them to a {@code /dev/nbdX}
 * over generic netlink, and (persist mode) replace them when the kernel reports the link dead, so that I/O waits out
 * a bridge restart (up to the dead-connection timeout) instead of failing.
 */
public final class Attacher {
    private static final Logger log = LoggerFactory.getLogger(Attacher.class);
    /** A server that accepts but does not finish the handshake in this long is given up on. */
    private static final long HANDSHAKE_TIMEOUT_MILLIS = 30_000;

    /** An export to attach: over TCP or a Unix socket. */
    public record Target(InetSocketAddress tcp, Path unix, String export) {
        /**
         * Parses {@code nbd://HOST[:PORT]/EXPORT} or {@code nbd+unix:///EXPORT?socket=PATH} (libnbd's URI forms, as
         * rbridge serve prints them).
         */
        public static Target parse(String uri) {
            URI u;
            try {
                u = URI.create(uri);
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("not an NBD URI: " + uri + " (nbd://HOST:PORT/EXPORT or"
                        + " nbd+unix:///EXPORT?socket=PATH)");
            }
            String export = u.getPath() == null || u.getPath().length() <= 1 ? "" : u.getPath().substring(1);
            if ("nbd".equals(u.getScheme())) {
                if (u.getHost() == null) {
                    throw new IllegalArgumentException("no host in " + uri);
                }
                return new Target(new InetSocketAddress(u.getHost(), u.getPort() < 0 ? 10809 : u.getPort()), null,
                        export);
            }
            if ("nbd+unix".equals(u.getScheme())) {
                String q = u.getQuery() == null ? "" : u.getQuery();
                for (String kv : q.split("&")) {
                    if (kv.startsWith("socket=")) {
                        return new Target(null, Path.of(kv.substring(7)), export);
                    }
                }
                throw new IllegalArgumentException("no socket= in " + uri);
            }
            if (u.getScheme() != null && u.getScheme().startsWith("nbds")) {
                throw new IllegalArgumentException("rbridge attach cannot use TLS (" + uri
                        + "): the kernel speaks plain"
                        + " NBD on the socket it is given. On the bridge's host, serve --unix PATH and attach"
                        + " nbd+unix:///EXPORT?socket=PATH (no network at all); across hosts, nbd-client built with"
                        + " GnuTLS relays TLS in user space (-certfile, -keyfile, -cacertfile)");
            }
            throw new IllegalArgumentException("not an NBD URI: " + uri + " (nbd://HOST:PORT/EXPORT or"
                    + " nbd+unix:///EXPORT?socket=PATH)");
        }

        public String uri() {
            return tcp != null ? "nbd://" + tcp.getHostString() + ":" + tcp.getPort() + "/" + export
                    : "nbd+unix:///" + export + "?socket=" + unix;
        }

        NativeSocket open() throws IOException {
            return tcp != null ? NativeSocket.connect(tcp) : NativeSocket.connect(unix);
        }
    }

    /**
     * @param index              device number, or -1 for the first free one
     * @param connections        sockets (the kernel gives each its own hardware queue); more than 1 needs an export
     *                           that allows multi-conn
     * @param blockSize          logical block size: a power of two from 512 to 4096
     * @param timeoutSeconds     a request unanswered this long marks its socket dead (0: the kernel's default)
     * @param deadConnSeconds    how long I/O waits for a dead socket to be replaced before failing
     * @param disconnectOnExit   the device goes away when this process ends
     */
    public record Options(int index, int connections, int blockSize, long timeoutSeconds, long deadConnSeconds,
            boolean disconnectOnExit) {
        public Options {
            if (connections < 1 || connections > 64) {
                throw new IllegalArgumentException("--connections must be 1 to 64");
            }
            if (Integer.bitCount(blockSize) != 1 || blockSize < 512 || blockSize > 4096) {
                throw new IllegalArgumentException("--block-size must be 512, 1024, 2048 or 4096");
            }
            if (timeoutSeconds < 0 || deadConnSeconds < 0) {
                throw new IllegalArgumentException("timeouts cannot be negative");
            }
        }
    }

    /** An attached device. */
    public record Attached(int index, long size, int connections, boolean readOnly) {
        public String device() {
            return "/dev/nbd" + index;
        }
    }

    private Attacher() {}

    /**
     * Connects, hands the sockets over, and returns the device. A device given with {@code --device} that is already
     * attached to this same URI (a restarted attach service) is adopted as it is, for watching.
     */
    public static Attached attach(Target target, Options o) throws IOException {
        if (o.index() >= 0) {
            Attached adopted = adopt(target, o);
            if (adopted != null) {
                return adopted;
            }
        }
        List<NativeSocket> sockets = new ArrayList<>();
        try {
            NbdClientHandshake.ExportInfo info = handshake(target, o.connections(), sockets, -1);
            if (o.connections() > 1 && !info.multiConn()) {
                throw new IOException(target.uri() + " does not allow several connections (no CAN_MULTI_CONN);"
                        + " use --connections 1");
            }
            if (info.minimumBlock() > o.blockSize()) {
                throw new IOException(target.uri() + " needs a block size of at least " + info.minimumBlock());
            }
            NbdNetlink nl = NbdNetlink.open(10_000);
            try {
                int index = nl.connect(o.index(), fds(sockets), new NbdNetlink.Settings(info.size(), o.blockSize(),
                        info.flags(), o.timeoutSeconds(), o.deadConnSeconds(),
                        o.disconnectOnExit() ? NbdNetlink.CFLAG_DISCONNECT_ON_CLOSE : 0, target.uri()));
                log.info("/dev/nbd{} attached to {} ({} bytes, {} connection(s), block size {})", index, target.uri(),
                        info.size(), o.connections(), o.blockSize());
                return new Attached(index, info.size(), o.connections(), info.readOnly());
            } finally {
                if (o.disconnectOnExit()) {
                    // The kernel disconnects the device when the socket that configured it closes: that is this
                    // one, kept open until the process ends.
                    KEEP_OPEN.add(nl);
                } else {
                    nl.close();
                }
            }
        } finally {
            sockets.forEach(NativeSocket::close); // the kernel holds its own references now
        }
    }

    private static Attached adopt(Target target, Options o) throws IOException {
        try (NbdNetlink nl = NbdNetlink.open(10_000)) {
            List<NbdNetlink.Device> st = nl.status(o.index());
            if (st.stream().noneMatch(NbdNetlink.Device::connected)) {
                return null;
            }
        }
        Path sys = Path.of("/sys/block/nbd" + o.index());
        String backend = read(sys.resolve("backend"));
        if (!backend.equals(target.uri())) {
            throw new IOException("/dev/nbd" + o.index() + " is already attached"
                    + (backend.isEmpty() ? "" : " to " + backend) + "; detach it first (rbridge detach /dev/nbd"
                    + o.index() + ") or choose another --device");
        }
        long size = readLong(sys.resolve("size")) * 512;
        log.info("/dev/nbd{} is already attached to {}; adopting it", o.index(), target.uri());
        return new Attached(o.index(), size, o.connections(), "1".equals(read(sys.resolve("ro"))));
    }

    private static final List<NbdNetlink> KEEP_OPEN = new CopyOnWriteArrayList<>();

    /**
     * Watches the device until {@code running} turns false or the device is disconnected by someone (then returns):
     * whenever the kernel reports its link dead, connects again (retrying with back-off) and hands the new sockets
     * over with RECONFIGURE.
     */
    public static void persist(Target target, Options o, Attached device, BooleanSupplier running) throws IOException {
        try (NbdNetlink events = NbdNetlink.open(1000); NbdNetlink control = NbdNetlink.open(10_000)) {
            events.watchLinks();
            long lastCheck = 0;
            long lastSizeCheck = System.nanoTime();
            Growth growth = new Growth(device, target.uri());
            CompletableFuture<Long> probe = CompletableFuture.completedFuture(null);
            while (running.getAsBoolean()) {
                int dead = events.awaitLinkDead();
                if (dead == device.index()) {
                    log.warn("{}: the kernel reports its link to {} dead; reconnecting", device.device(), target.uri());
                    if (!reconnect(target, o, device, control, running, growth)) {
                        return;
                    }
                    continue;
                }
                long now = System.nanoTime();
                if (now - lastCheck > TimeUnit.SECONDS.toNanos(2)) {
                    lastCheck = now;
                    List<NbdNetlink.Device> st = control.status(device.index());
                    if (st.stream().noneMatch(NbdNetlink.Device::connected)) {
                        log.info("{} was disconnected; no longer watching it", device.device());
                        return;
                    }
                }
                Long answered = probe.isDone() ? probe.getNow(null) : null;
                if (answered != null) {
                    growth.seen(answered, control);
                    probe = CompletableFuture.completedFuture(null);
                }
                if (now - lastSizeCheck > SIZE_CHECK_NANOS && probe.isDone()) {
                    lastSizeCheck = now;
                    // Asked on a thread of its own: a connect to an unreachable server may block for minutes, and
                    // this loop must go on hearing link-dead events meanwhile.
                    probe = CompletableFuture.supplyAsync(() -> exportSize(target, device),
                            Thread.ofVirtual().name("attach-size-" + device.index())::start);
                }
            }
        }
    }

    /** The export's size as the server says it now (NBD_OPT_INFO, no session), or null when it cannot be asked. */
    private static Long exportSize(Target target, Attached device) {
        try (NativeSocket s = target.open()) {
            s.receiveTimeout(SIZE_CHECK_TIMEOUT_MILLIS);
            return NbdClientHandshake.info(s, target.export()).size();
        } catch (IOException | RuntimeException e) {
            log.debug("{}: could not ask {} for its size: {}", device.device(), target.uri(), e.getMessage());
            return null;
        }
    }

    /** How often a watched device asks the server for the export's size (a volume grown online). */
    private static final long SIZE_CHECK_NANOS = TimeUnit.SECONDS.toNanos(10);
    private static final long SIZE_CHECK_TIMEOUT_MILLIS = 3000;

    /**
     * The size the device has, and growing it when the export grew: the kernel's RECONFIGURE takes a new size (since
     * Linux 5.3); an older kernel keeps the old size, which is said once with what to do.
     */
    private static final class Growth {
        private final Attached device;
        private final String backend;
        private long size;
        private long unresizable = -1;

        Growth(Attached device, String backend) {
            this.device = device;
            this.backend = backend;
            this.size = device.size();
        }

        long size() {
            return size;
        }

        /** The export is {@code exportSize} bytes now: grows the device to match, once; never throws. */
        void seen(long exportSize, NbdNetlink control) {
            if (exportSize <= size || exportSize == unresizable) {
                return;
            }
            long now;
            try {
                control.resize(device.index(), exportSize, backend);
                now = readLong(Path.of("/sys/block/nbd" + device.index(), "size")) * 512;
            } catch (IOException e) {
                unresizable = exportSize;
                log.warn("{}: the export grew to {} bytes but resizing the device failed ({}); it stays {} bytes:"
                        + " detach and attach it again to use the new size", device.device(), exportSize,
                        e.getMessage(), size);
                return;
            }
            if (now >= exportSize / 512 * 512) { // sysfs counts 512-byte sectors
                log.info("{}: grown from {} to {} bytes, as the export did", device.device(), size, exportSize);
                size = exportSize;
            } else {
                unresizable = exportSize;
                log.warn("{}: the export grew to {} bytes but this kernel did not resize the device (it stays {}"
                        + " bytes); detach and attach it again to use the new size", device.device(), exportSize, now);
            }
        }
    }

    private static boolean reconnect(Target target, Options o, Attached device, NbdNetlink control,
            BooleanSupplier running, Growth growth) throws IOException {
        long backoff = 250;
        String lastError = null;
        int attempt = 0;
        while (running.getAsBoolean()) {
            attempt++;
            List<NativeSocket> sockets = new ArrayList<>();
            try {
                NbdClientHandshake.ExportInfo info = handshake(target, o.connections(), sockets, growth.size());
                control.reconfigure(device.index(), fds(sockets), target.uri());
                log.info("{}: reconnected to {} ({} connection(s), attempt {})", device.device(), target.uri(),
                        sockets.size(), attempt);
                growth.seen(info.size(), control);
                return true;
            } catch (GenericNetlink.NetlinkException e) {
                if (e.errno == 28) { // ENOSPC: no dead socket left to replace
                    log.info("{}: no dead connection left to replace", device.device());
                    return true;
                }
                if (control.status(device.index()).stream().noneMatch(NbdNetlink.Device::connected)) {
                    log.info("{} was disconnected while reconnecting; no longer watching it", device.device());
                    return false;
                }
                lastError = logOnce(device, e.getMessage(), lastError);
            } catch (IOException e) {
                lastError = logOnce(device, e.getMessage(), lastError);
            } finally {
                sockets.forEach(NativeSocket::close);
            }
            try {
                Thread.sleep(backoff);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
            backoff = Math.min(5000, backoff * 2);
        }
        return false;
    }

    private static String logOnce(Attached device, String error, String last) {
        if (!error.equals(last)) {
            log.warn("{}: reconnect failed: {}; retrying", device.device(), error);
        }
        return error;
    }

    public static void detach(int index) throws IOException {
        try (NbdNetlink nl = NbdNetlink.open(10_000)) {
            nl.disconnect(index);
        }
    }

    /** A device as {@code rbridge status} shows it. */
    public record DeviceStatus(int index, boolean connected, long sizeBytes, String backend) {
        public String device() {
            return "/dev/nbd" + index;
        }
    }

    /** Every nbd device the kernel has, or just one ({@code index >= 0}). */
    public static List<DeviceStatus> status(int index) throws IOException {
        List<DeviceStatus> out = new ArrayList<>();
        try (NbdNetlink nl = NbdNetlink.open(10_000)) {
            for (NbdNetlink.Device d : nl.status(index)) {
                Path sys = Path.of("/sys/block/nbd" + d.index());
                long sectors = readLong(sys.resolve("size"));
                String backend = read(sys.resolve("backend"));
                out.add(new DeviceStatus(d.index(), d.connected(), sectors * 512, backend));
            }
        }
        out.sort(Comparator.comparingInt(DeviceStatus::index));
        return out;
    }

    /** {@code /dev/nbd3}, {@code nbd3} or {@code 3} to 3. */
    public static int parseDevice(String s) {
        String t = s.startsWith("/dev/") ? s.substring(5) : s;
        t = t.startsWith("nbd") ? t.substring(3) : t;
        try {
            int i = Integer.parseInt(t);
            if (i >= 0) {
                return i;
            }
        } catch (NumberFormatException e) {
            // fall through
        }
        throw new IllegalArgumentException("not an nbd device: " + s + " (/dev/nbdN or N)");
    }

    private static NbdClientHandshake.ExportInfo handshake(Target target, int n, List<NativeSocket> sockets,
            long expectedSize) throws IOException {
        NbdClientHandshake.ExportInfo first = null;
        for (int i = 0; i < n; i++) {
            NativeSocket s = target.open();
            sockets.add(s);
            s.receiveTimeout(HANDSHAKE_TIMEOUT_MILLIS);
            NbdClientHandshake.ExportInfo info = NbdClientHandshake.go(s, target.export());
            s.receiveTimeout(0); // the kernel's receive thread must block without a timeout of ours
            if (first == null) {
                first = info;
            } else if (info.size() != first.size()) {
                throw new IOException(target.uri() + " gave connection " + (i + 1) + " another size");
            }
        }
        if (expectedSize >= 0 && first.size() < expectedSize) { // larger: the export grew, and the device follows
            throw new IOException(target.uri() + " is now " + first.size() + " bytes, less than the device's "
                    + expectedSize + "; not reconnecting to a different export");
        }
        return first;
    }

    private static int[] fds(List<NativeSocket> sockets) {
        return sockets.stream().mapToInt(NativeSocket::fd).toArray();
    }

    private static long readLong(Path p) {
        String s = read(p);
        try {
            return s.isEmpty() ? 0 : Long.parseLong(s);
        } catch (NumberFormatException e) {
            return 0;
        }
    }

    private static String read(Path p) {
        try {
            return Files.readString(p).strip();
        } catch (IOException e) {
            return "";
        }
    }
}
