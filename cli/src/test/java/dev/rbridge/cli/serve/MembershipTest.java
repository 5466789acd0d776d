package dev.rbridge.cli.serve;

import dev.rbridge.cli.CliProcess;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Memservers join a serving bridge without a restart: added with rbridge admin while a volume is degraded (the rebuild
 * completes onto the new one), and found through a DNS name that starts listing another address (the JVM's hosts
 * file stands in for the DNS server a Kubernetes headless Service would be).
 */
@Timeout(300)
@Tag("fault")
class MembershipTest {
    private static final Pattern LENDING = Pattern.compile("lending \\S+ at (\\S+)");
    private static final String TOKEN = "membership-token-0123456789abcdef";
    /**
     * How often the bridges of the DNS tests resolve their names ({@code -Drbridge.dnsIntervalSeconds}; 10 s unless
     * set), so that their waits for a resolution are short.
     */
    private static final int DNS_INTERVAL_SECONDS = 2;
    private static final String DNS_INTERVAL = "-Drbridge.dnsIntervalSeconds=" + DNS_INTERVAL_SECONDS;

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    private final List<Process> extra = new ArrayList<>();

    private String memserver(Path dir, String name, String listen) throws Exception {
        Path log = dir.resolve(name + ".log");
        Process p = CliProcess.start(log, "memserver", "--listen", listen, "--capacity", "256M", "--admin", "none",
                "--metrics", "none", "--token", TOKEN);
        extra.add(p);
        String line = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8)).readLine();
        assertTrue(line != null, Files.readString(log));
        Matcher m = LENDING.matcher(line);
        assertTrue(m.find(), line);
        return m.group(1);
    }

    private void stopExtra() throws InterruptedException {
        for (Process p : extra) {
            p.destroy();
            p.waitFor(30, TimeUnit.SECONDS);
        }
    }

    @SuppressWarnings("unchecked")
    private static long up(Object memservers) {
        return ((List<Object>) memservers).stream().filter(m -> "up".equals(((Map<String, Object>) m).get("state")))
                .count();
    }

    @SuppressWarnings("unchecked")
    private static Object state(Object volumes) {
        return ((Map<String, Object>) ((List<Object>) volumes).getFirst()).get("state");
    }

    @Test
    @SuppressWarnings("unchecked")
    void aMemserverAddedWhileDegradedTakesTheRebuild() throws Exception {
        PeerTool.require("nbdsh", "libnbd-bin");
        Path dir = Files.createTempDirectory("membership");
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("add").memservers(2).token(TOKEN).timeout("2")
                .volume("disk,size=32M,replicas=2,slab=4M").start())) {
            PeerTool.check(60, "nbdsh", "-u", c.uri("disk"), "-c", "h.pwrite(b'm' * 65536, 5 * 1024 * 1024)");
            c.memserver(1).kill9();
            c.awaitAdmin("/volumes", v -> "degraded".equals(state(v)), Duration.ofSeconds(30));
            Path token = Files.writeString(dir.resolve("token"), TOKEN + "\n");
            // Nowhere to rebuild: the reason is logged and shown.
            c.awaitAdmin("/rebuild", r -> ((Map<String, Object>) r).get("waiting") != null, Duration.ofSeconds(30));
            c.bridge().awaitLog("rebuild waits: no reachable memserver has", Duration.ofSeconds(30));
            Process waiting = CliProcess.start(dir.resolve("waiting.log"), "admin", "--bridge", c.adminAddress(),
                    "--token-file", token.toString(), "rebuild");
            String waitingOut = new String(waiting.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(waiting.waitFor(60, TimeUnit.SECONDS));
            assertTrue(waitingOut.startsWith("waiting: no reachable memserver has"), waitingOut);
            Process volumesWatch = CliProcess.start(dir.resolve("volumes-watch.log"), "admin", "--bridge",
                    c.adminAddress(), "--token-file", token.toString(), "volumes", "--watch");
            var volumesWatched = output(volumesWatch);
            String third = memserver(dir, "third", "127.0.0.1:0");
            Path log = dir.resolve("admin.log");
            Process add = CliProcess.start(log, "admin", "--bridge", c.adminAddress(), "--token-file",
                    token.toString(), "add-memserver", third);
            String out = new String(add.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(add.waitFor(60, TimeUnit.SECONDS));
            assertEquals(0, add.exitValue(), out + Files.readString(log));
            Process watch = CliProcess.start(dir.resolve("watch.log"), "admin", "--bridge", c.adminAddress(),
                    "--token-file", token.toString(), "rebuild", "--watch");
            String watched = new String(watch.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(watch.waitFor(120, TimeUnit.SECONDS), "--watch ends when nothing is left: " + watched);
            assertEquals(0, watch.exitValue(), watched + Files.readString(dir.resolve("watch.log")));
            assertTrue(watched.strip().endsWith("nothing to rebuild"), watched);
            assertTrue(volumesWatch.waitFor(60, TimeUnit.SECONDS), "volumes --watch ends once every volume is healthy");
            String volumesOut = volumesWatched.get(10, TimeUnit.SECONDS);
            assertTrue(volumesOut.startsWith("disk: degraded, ") && volumesOut.strip().lines().toList().getLast()
                    .matches("disk: healthy, (\\d+) of \\1 allocated slab\\(s\\) healthy \\(100%\\)"), volumesOut);
            c.awaitAdmin("/volumes", v -> "healthy".equals(state(v)), Duration.ofSeconds(60));
            c.bridge().awaitLog("memserver " + third + " added (admin)", Duration.ofSeconds(30));
            String back = PeerTool.check(60, "nbdsh", "-u", c.uri("disk"), "-c",
                    "print(h.pread(4, 5 * 1024 * 1024 + 100))");
            assertTrue(back.contains("mmmm"), back);
        } finally {
            stopExtra();
        }
    }

    @Test
    void aDnsNameThatListsAnotherAddressAddsThatMemserver() throws Exception {
        Path dir = Files.createTempDirectory("membership-dns");
        int port;
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.2"))) {
            port = s.getLocalPort();
        }
        String first = memserver(dir, "first", "127.0.0.2:" + port);
        String second = memserver(dir, "second", "127.0.0.3:" + port);
        Path hosts = Files.writeString(dir.resolve("hosts"), "127.0.0.2 memservers.rbridge.test\n");
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("dns").memservers(0).token(TOKEN)
                .jvmArgs("-Djdk.net.hosts.file=" + hosts, "-Dsun.net.inetaddr.ttl=1", DNS_INTERVAL)
                .bridgeArgs("--memserver-dns", "memservers.rbridge.test:" + port)
                .volume("disk,size=32M,replicas=1,slab=4M").start())) {
            assertEquals(1L, up(c.admin("/memservers")), String.valueOf(c.admin("/memservers")));
            Files.writeString(hosts, "127.0.0.3 memservers.rbridge.test\n", StandardOpenOption.APPEND);
            c.awaitAdmin("/memservers", m -> up(m) == 2, Duration.ofSeconds(60));
            c.bridge().awaitLog("memserver " + second + " added (DNS name memservers.rbridge.test)",
                    Duration.ofSeconds(30));
            c.bridge().awaitLog("memserver " + first + " added", Duration.ofSeconds(30));
        } finally {
            stopExtra();
        }
    }

    /**
     * The other way round (docs/operations.md, "Adding memservers while serving"): an address the name stops listing
     * stays while its memserver is up, and is dropped once it is down. The hosts file stands in for DNS, with the
     * JVM's cache at 1 s; the bridge resolves its names every {@link #DNS_INTERVAL_SECONDS} seconds.
     */
    @Test
    void aDnsNameThatStopsListingAnAddressDropsThatMemserverOnceItIsDown() throws Exception {
        Path dir = Files.createTempDirectory("membership-dns-drop");
        int port;
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.2"))) {
            port = s.getLocalPort();
        }
        String first = memserver(dir, "first", "127.0.0.2:" + port);
        String second = memserver(dir, "second", "127.0.0.3:" + port);
        Process secondProcess = extra.getLast();
        Path hosts = Files.writeString(dir.resolve("hosts"),
                "127.0.0.2 memservers.rbridge.test\n127.0.0.3 memservers.rbridge.test\n");
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("dns-drop").memservers(0).token(TOKEN)
                .jvmArgs("-Djdk.net.hosts.file=" + hosts, "-Dsun.net.inetaddr.ttl=1", DNS_INTERVAL)
                .bridgeArgs("--memserver-dns", "memservers.rbridge.test:" + port)
                .volume("disk,size=32M,replicas=1,slab=4M").start())) {
            c.awaitAdmin("/memservers", m -> up(m) == 2, Duration.ofSeconds(60));
            Files.writeString(hosts, "127.0.0.2 memservers.rbridge.test\n");
            // A window in which nothing may happen, on purpose: at least two resolutions, after the JVM's 1 s cache,
            // see the shorter answer, and the memserver it left out, still up, must stay. (One interval more than
            // two, for a loaded machine.)
            Thread.sleep((3 * DNS_INTERVAL_SECONDS + 2) * 1000L);
            assertTrue(listed(c.admin("/memservers"), second), "an address the name no longer lists was dropped while"
                    + " its memserver was up: " + c.admin("/memservers"));
            assertFalse(c.bridge().log().contains("memserver " + second + " removed"), c.bridge().log());

            secondProcess.destroy();
            assertTrue(secondProcess.waitFor(30, TimeUnit.SECONDS), "the second memserver did not stop");
            c.awaitAdmin("/memservers", m -> !listed(m, second) && listed(m, first), Duration.ofSeconds(60));
            c.bridge().awaitLog("memserver " + second
                    + " removed (DNS name memservers.rbridge.test no longer lists it)", Duration.ofSeconds(30));
            assertEquals(1L, up(c.admin("/memservers")), String.valueOf(c.admin("/memservers")));
        } finally {
            stopExtra();
        }
    }

    /** Whether the bridge's /memservers lists {@code address}. */
    @SuppressWarnings("unchecked")
    private static boolean listed(Object memservers, String address) {
        return ((List<Object>) memservers).stream()
                .anyMatch(m -> address.equals(((Map<String, Object>) m).get("memserver")));
    }

    /**
     * Draining a memserver from the bridge moves every replica it holds while writes go on: it ends holding nothing
     * and unused, the volume healthy throughout its end, every byte as last written.
     */
    @Test
    @SuppressWarnings("unchecked")
    void drainingAMemserverMovesItsReplicasWhileWritesGoOn() throws Exception {
        PeerTool.require("nbdcopy", "libnbd-bin");
        Path dir = Files.createTempDirectory("membership-drain");
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("drain").memservers(3).token(TOKEN).timeout("2")
                .volume("disk,size=48M,replicas=2,slab=4M").start())) {
            byte[] first = new byte[48 << 20];
            new java.util.Random(1).nextBytes(first);
            Path in = Files.write(dir.resolve("first"), first);
            PeerTool.check(120, "nbdcopy", in.toString(), c.uri("disk"));
            String victim = c.memserver(0).address();
            Path token = Files.writeString(dir.resolve("token"), TOKEN + "\n");
            Process drain = CliProcess.start(dir.resolve("drain.log"), "admin", "--bridge", c.adminAddress(),
                    "--token-file", token.toString(), "drain-memserver", victim);
            drain.getInputStream().readAllBytes();
            assertTrue(drain.waitFor(60, TimeUnit.SECONDS));
            assertEquals(0, drain.exitValue(), Files.readString(dir.resolve("drain.log")));
            // Writes while the replicas move: the first 16 MiB again, other bytes.
            byte[] second = new byte[16 << 20];
            new java.util.Random(2).nextBytes(second);
            Path part = Files.write(dir.resolve("second"), second);
            PeerTool.check(120, "nbdcopy", part.toString(), c.uri("disk"));
            c.awaitAdmin("/memservers", m -> ((List<Object>) m).stream()
                    .noneMatch(x -> victim.equals(((Map<String, Object>) x).get("memserver"))),
                    Duration.ofSeconds(120));
            assertEquals("healthy", state(c.admin("/volumes")));
            c.bridge().awaitLog("memserver " + victim + ": drained", Duration.ofSeconds(30));
            String slabs = String.valueOf(c.admin("/volumes/disk/slabs"));
            assertTrue(!slabs.contains(victim + "#"), slabs);
            Path out = dir.resolve("out");
            PeerTool.check(120, "nbdcopy", c.uri("disk"), out.toString());
            byte[] expected = first.clone();
            System.arraycopy(second, 0, expected, 0, second.length);
            assertEquals(-1, java.util.Arrays.mismatch(expected, Files.readAllBytes(out)), "the data after the drain");
        }
    }

    /** SIGHUP reads --config again: a memserver line added since start joins the serving bridge. */
    @Test
    void aConfigReloadAddsTheMemserversItNowLists() throws Exception {
        Path dir = Files.createTempDirectory("membership-reload");
        String extraMemserver = memserver(dir, "extra", "127.0.0.1:0");
        Path config = Files.writeString(dir.resolve("serve.conf"), "# memservers are added below while serving\n");
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("reload").memservers(1).token(TOKEN)
                .bridgeArgs("--config", config.toString()).volume("disk,size=32M,replicas=1,slab=4M").start())) {
            assertEquals(1L, up(c.admin("/memservers")));
            Files.writeString(config, "memserver = " + extraMemserver + "\n", StandardOpenOption.APPEND);
            Process hup = new ProcessBuilder("kill", "-HUP", Long.toString(c.bridge().pid())).start();
            assertTrue(hup.waitFor(10, TimeUnit.SECONDS));
            c.awaitAdmin("/memservers", m -> up(m) == 2, Duration.ofSeconds(30));
            c.bridge().awaitLog("memserver " + extraMemserver + " added (--config " + config
                    + " reloaded)", Duration.ofSeconds(30));
            c.bridge().awaitLog("SIGHUP: reloaded", Duration.ofSeconds(30));
        } finally {
            stopExtra();
        }
    }

    /**
     * A rolling restart of three memservers, as an update would do it, under fio writing with verification: each is
     * drained from the bridge, restarted and added back, one after another. No slab is ever without a live replica,
     * and fio reads back every byte it wrote.
     */
    @Test
    @SuppressWarnings("unchecked")
    void aRollingRestartOfEveryMemserverUnderFioVerifyLosesNothing() throws Exception {
        Path dir = Files.createTempDirectory("membership-rolling");
        Path token = Files.writeString(dir.resolve("token"), TOKEN + "\n");
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("rolling").memservers(3).capacity("512M")
                .token(TOKEN).timeout("2").volume("disk,size=96M,replicas=2,slab=8M").start())) {
            rollUnderFioVerify(c, dir, i -> {
                String address = c.memserver(i).address();
                admin(c, token, "drain-memserver", address);
                c.awaitAdmin("/memservers", m -> ((List<Object>) m).stream().noneMatch(x -> address.equals(
                        ((Map<String, Object>) x).get("memserver"))), Duration.ofSeconds(120));
                c.memserver(i).restart();
                admin(c, token, "add-memserver", address);
            });
        }
    }

    /**
     * The rolling update Kubernetes does with the manifests' preStop hook: each memserver in turn is told to drain by
     * its own admin interface ({@code admin drain --wait}, the hook's command), which returns once the memserver has
     * exited; the bridge moved its replicas away and let it go without being told. The memserver is started again at
     * the same address and the bridge takes it back by itself. Under fio verify, no slab is ever without a live
     * replica and every byte reads back.
     */
    @Test
    void aRollingUpdateWhereEachMemserverDrainsItselfLosesNothing() throws Exception {
        Path dir = Files.createTempDirectory("membership-prestop");
        Path token = Files.writeString(dir.resolve("token"), TOKEN + "\n");
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("prestop").memservers(3).capacity("512M")
                .memserverAdmin(true).token(TOKEN).timeout("2").volume("disk,size=96M,replicas=2,slab=8M").start())) {
            rollUnderFioVerify(c, dir, i -> {
                ServeCluster.Memserver m = c.memserver(i);
                Path log = Files.createTempFile(dir, "prestop", ".log");
                Process hook = CliProcess.start(log, "admin", "--memserver", m.adminAddress(), "--token-file",
                        token.toString(), "drain", "--wait");
                var said = output(hook);
                if (!hook.waitFor(120, TimeUnit.SECONDS)) {
                    hook.destroyForcibly();
                    throw new AssertionError("drain --wait did not return within 120 s: the memserver "
                            + m.address() + " was not let go");
                }
                String out = said.get(10, TimeUnit.SECONDS);
                assertEquals(0, hook.exitValue(), out + Files.readString(log));
                assertTrue(out.contains("memserver exited: drained"), out);
                assertTrue(m.process().process.waitFor(10, TimeUnit.SECONDS), "the drained memserver did not exit");
                assertEquals(0, m.process().process.exitValue(), "a drained memserver exits with 0");
                c.bridge().awaitLog("memserver " + m.address() + " is draining: moving", Duration.ofSeconds(30));
                m.restart();
            });
            c.bridge().awaitLog("drained; this bridge let its connection go", Duration.ofSeconds(30));
        }
    }

    /**
     * {@code drain --wait} where the bridge cannot follow: two memservers for a volume of two replicas leave nowhere to
     * move a replica, so nothing moves, and after {@link #STALL_SECONDS} of that ({@code --give-up-after}; 120 s by
     * default) the command gives up with exit 1 and says why, while the memserver stays up, draining, holding the
     * replicas.
     */
    @Test
    void drainWaitGivesUpWithAReasonWhenTheBridgeCannotMoveItsReplicas() throws Exception {
        Path dir = Files.createTempDirectory("membership-stall");
        Path token = Files.writeString(dir.resolve("token"), TOKEN + "\n");
        try (ServeCluster c = LOGS.watch(ServeCluster.builder("stall").memservers(2).memserverAdmin(true).token(TOKEN)
                .timeout("2").volume("disk,size=16M,replicas=2,slab=8M").start())) {
            PeerTool.require("nbdcopy", "libnbd-bin");
            byte[] data = new byte[16 << 20];
            new java.util.Random(16).nextBytes(data);
            Path in = Files.write(dir.resolve("in"), data);
            PeerTool.check(60, "nbdcopy", in.toString(), c.uri("disk"));
            ServeCluster.Memserver m = c.memserver(0);
            Path log = dir.resolve("drain.log");
            long start = System.nanoTime();
            Process hook = CliProcess.start(log, "admin", "--memserver", m.adminAddress(), "--token-file",
                    token.toString(), "drain", "--wait", "--give-up-after", String.valueOf(STALL_SECONDS));
            var said = output(hook);
            long limit = STALL_SECONDS + 60;
            if (!hook.waitFor(limit, TimeUnit.SECONDS)) {
                hook.destroyForcibly();
                throw new AssertionError("drain --wait did not give up within " + limit + " s");
            }
            long waited = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - start);
            String out = said.get(10, TimeUnit.SECONDS);
            String err = Files.readString(log);
            assertEquals(1, hook.exitValue(), out + err);
            assertTrue(waited >= STALL_SECONDS, "gave up after " + waited + " s, before nothing had moved for "
                    + STALL_SECONDS + " s");
            assertTrue(out.contains("draining: waiting for 1 client(s) to leave"), out);
            assertTrue(err.contains("nothing moved for " + STALL_SECONDS + " s")
                    && err.contains("it stays draining"), err);
            assertTrue(m.isAlive(), "the memserver stays up when the drain gives up");
            assertEquals(2, up(c.admin("/memservers")), "the bridge keeps both memservers");
            c.bridge().awaitLog("memserver " + m.address() + " is draining, but its", Duration.ofSeconds(30));
            Path back = dir.resolve("back");
            PeerTool.check(60, "nbdcopy", c.uri("disk"), back.toString());
            assertEquals(-1, java.util.Arrays.mismatch(data, Files.readAllBytes(back)), "the data after the drain");
        }
    }

    /** drain --wait's --give-up-after here: how long it waits with nothing moving (the default is 120 s). */
    private static final long STALL_SECONDS = 8;

    interface Step {
        void run(int memserver) throws Exception;
    }

    /**
     * Runs {@code step} on each memserver in turn while fio writes with verification, waiting after each until all
     * three are up again; then checks that fio verified everything, that no slab was ever without a live replica
     * (lost, as the bridge's admin says), and that every byte reads back once more.
     */
    @SuppressWarnings("unchecked")
    private static void rollUnderFioVerify(ServeCluster c, Path dir, Step step) throws Exception {
        PeerTool.require("fio", "fio");
        List<String> fio = List.of("fio", "--name=rolling", "--ioengine=nbd", "--uri=" + c.uri("disk"),
                "--rw=randwrite", "--bs=64k", "--iodepth=8", "--size=64M", "--randrepeat=1", "--verify=crc32c",
                "--do_verify=1", "--verify_fatal=1", "--verify_state_save=0", "--rate=4m");
        Path fioOut = dir.resolve("fio.out");
        Process writer = new ProcessBuilder(fio).redirectErrorStream(true).redirectOutput(fioOut.toFile()).start();
        java.util.concurrent.atomic.AtomicReference<String> lostSeen =
                new java.util.concurrent.atomic.AtomicReference<>();
        Thread watcher = Thread.ofVirtual().start(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                try {
                    Object v = c.admin("/volumes");
                    Object lost = ((Map<String, Object>) ((List<Object>) v).getFirst()).get("lost");
                    if (lost instanceof Number n && n.longValue() > 0) {
                        lostSeen.compareAndSet(null, String.valueOf(v));
                    }
                    Thread.sleep(100);
                } catch (InterruptedException e) {
                    return;
                } catch (RuntimeException e) {
                    // the admin answer raced a restart; the next poll sees
                }
            }
        });
        try {
            for (int i = 0; i < 3; i++) {
                step.run(i);
                c.awaitAdmin("/memservers", m -> up(m) == 3, Duration.ofSeconds(60));
            }
        } finally {
            watcher.interrupt();
        }
        assertTrue(writer.waitFor(180, TimeUnit.SECONDS), "fio did not finish: " + Files.readString(fioOut));
        assertEquals(0, writer.exitValue(), Files.readString(fioOut));
        assertTrue(!Files.readString(fioOut).contains("verify: bad"), Files.readString(fioOut));
        assertEquals(null, lostSeen.get(), "a slab was without a live replica during the rolling restart");
        PeerTool.Result again = PeerTool.run(120, new java.util.ArrayList<>(List.of("fio", "--name=rolling",
                "--ioengine=nbd", "--uri=" + c.uri("disk"), "--rw=randwrite", "--bs=64k", "--iodepth=8",
                "--size=64M", "--randrepeat=1", "--verify=crc32c", "--verify_only", "--verify_fatal=1",
                "--verify_state_save=0")));
        assertEquals(0, again.exitCode(), "every byte fio wrote reads back after the restarts:\n" + again.output());
        assertEquals("healthy", state(c.admin("/volumes")));
    }

    /** Everything {@code p} prints, read on a thread of its own so that the caller can bound its wait. */
    private static java.util.concurrent.CompletableFuture<String> output(Process p) {
        return java.util.concurrent.CompletableFuture.supplyAsync(() -> {
            try {
                return new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            } catch (java.io.IOException e) {
                return e.toString();
            }
        });
    }

    private static void admin(ServeCluster c, Path token, String action, String address) throws Exception {
        ServeCluster.AdminRun r = c.adminCli(token, action, address);
        assertEquals(0, r.code(), action + " " + address + ": " + r.out());
    }
}
