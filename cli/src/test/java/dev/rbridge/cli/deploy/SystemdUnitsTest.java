package dev.rbridge.cli.deploy;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The systemd units as {@code deploy/install.sh --root} installs them: {@code systemd-analyze verify --root} over that
 * root (the install layout plus this host's systemd units, so targets resolve and every Exec path is checked in the
 * installed tree) reports nothing; a broken unit in the same root is reported; the units keep the properties the
 * deployment relies on; and the installed launcher runs the example configuration: two memservers from
 * memserver.env's arguments and a bridge from serve.conf (addresses moved to free local ports) become ready and stop
 * on SIGTERM within the unit's TimeoutStopSec.
 */
@Tag("deploy")
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class SystemdUnitsTest {
    private static final List<String> UNITS =
            List.of("rbridge-memserver.service", "rbridge-bridge.service", "rbridge-attach@.service");
    private Path root;
    private final List<Process> started = new ArrayList<>();

    @BeforeAll
    void install() throws Exception {
        Deploy.requireJar();
        Deploy.require("systemd-analyze", "systemd");
        root = Deploy.ROOT.resolve("cli/target/systemd-root");
        PeerTool.check(60, "rm", "-rf", "--one-file-system", root.toString());
        String out = PeerTool.check(120, Deploy.DEPLOY.resolve("install.sh").toString(), "--root", root.toString(),
                "--jar", Deploy.JAR.toString());
        assertTrue(out.contains("installed under"), out);
        // The rest of the system: this host's systemd units (targets such as sysinit.target that every unit needs).
        Path systemUnits = Path.of("/usr/lib/systemd/system");
        assertTrue(Files.isDirectory(systemUnits.resolve("multi-user.target").getParent()),
                "this host has no " + systemUnits + " to verify against");
        Files.createDirectories(root.resolve("usr/lib/systemd"));
        PeerTool.check(60, "cp", "-a", systemUnits.toString(), root.resolve("usr/lib/systemd/").toString());
        // The host's /bin/kill, which the bridge unit's ExecReload runs (every Exec path is checked in the root).
        Files.createDirectories(root.resolve("bin"));
        PeerTool.check(60, "cp", "-L", "/bin/kill", root.resolve("bin/kill").toString());
    }

    @AfterAll
    void stopAll() throws Exception {
        for (Process p : started) {
            Deploy.stop(p, Duration.ofSeconds(10));
        }
    }

    @Test
    void installLayout() throws Exception {
        for (String f : List.of("opt/rbridge/bin/rbridge", "opt/rbridge/libexec/setup-nbd.sh",
                "opt/rbridge/libexec/check-rdma.sh")) {
            assertTrue(Files.isExecutable(root.resolve(f)), f + " is installed and executable");
        }
        assertEquals(Deploy.sha256(Deploy.JAR), Deploy.sha256(root.resolve("opt/rbridge/lib/rbridge.jar")));
        for (String u : UNITS) {
            assertTrue(Files.isRegularFile(root.resolve("etc/systemd/system/" + u)), u);
        }
        for (String c : List.of("serve.conf", "memserver.env", "attach-nbd0.env", "token")) {
            assertTrue(Files.isRegularFile(root.resolve("etc/rbridge/" + c)), "/etc/rbridge/" + c);
        }
        assertTrue(Files.readString(root.resolve("etc/rbridge/token")).strip().length() >= 32, "a random token");
        String version = PeerTool.check(60, root.resolve("opt/rbridge/bin/rbridge").toString(), "--version");
        assertTrue(version.startsWith("rbridge"), "the installed launcher runs the installed jar: " + version);
        // A second install keeps edited configuration.
        Files.writeString(root.resolve("etc/rbridge/serve.conf"), "# edited\n", StandardOpenOption.APPEND);
        String again = PeerTool.check(120, Deploy.DEPLOY.resolve("install.sh").toString(), "--root", root.toString(),
                "--jar", Deploy.JAR.toString());
        assertTrue(again.contains("kept /etc/rbridge/serve.conf"), again);
        assertTrue(Files.readString(root.resolve("etc/rbridge/serve.conf")).endsWith("# edited\n"));
    }

    @Test
    void systemdAnalyzeVerifyAcceptsTheInstalledUnits() {
        PeerTool.Result r = PeerTool.run(120, List.of("systemd-analyze", "verify", "--root=" + root, "--man=no",
                "rbridge-memserver.service", "rbridge-bridge.service", "rbridge-attach@nbd0.service"));
        assertEquals(0, r.exitCode(), "systemd-analyze verify:\n" + r.output());
        // Unknown keys and unparsable values are only warnings (exit 0): any output counts as a failure.
        assertEquals("", r.output().strip(), "systemd-analyze verify printed warnings");
    }

    @Test
    void systemdAnalyzeVerifyReportsABrokenUnit() throws Exception {
        Path units = root.resolve("etc/systemd/system");
        String unit = Files.readString(units.resolve("rbridge-bridge.service"))
                .replace("LimitMEMLOCK=", "LimitMEMLOK=")
                .replace("ExecStart=/opt/rbridge/bin/rbridge", "ExecStart=/opt/rbridge/bin/rbridge-missing");
        Path broken = units.resolve("rbridge-broken-copy.service");
        Files.writeString(broken, unit);
        try {
            PeerTool.Result r = PeerTool.run(120, List.of("systemd-analyze", "verify", "--root=" + root, "--man=no",
                    "rbridge-broken-copy.service"));
            assertNotEquals(0, r.exitCode(), "a missing ExecStart binary fails verify:\n" + r.output());
            assertTrue(r.output().contains("rbridge-missing"), r.output());
            assertTrue(r.output().contains("LimitMEMLOK"), "the unknown key is reported:\n" + r.output());
        } finally {
            Files.delete(broken);
        }
    }

    @Test
    void unitsKeepWhatTheDeploymentNeeds() throws Exception {
        Map<String, Map<String, List<String>>> units = new LinkedHashMap<>();
        for (String u : UNITS) {
            units.put(u, parse(Deploy.DEPLOY.resolve("systemd/" + u)));
        }
        for (var e : units.entrySet()) {
            Map<String, List<String>> s = e.getValue();
            assertEquals(List.of("infinity"), s.get("Service.LimitMEMLOCK"), e.getKey() + " LimitMEMLOCK");
            assertEquals(List.of("on-failure"), s.get("Service.Restart"), e.getKey() + " Restart");
            assertTrue(s.containsKey("Service.RestartSec"), e.getKey() + " RestartSec");
            assertTrue(s.containsKey("Service.TimeoutStopSec"), e.getKey() + " TimeoutStopSec");
            assertTrue(s.get("Service.ExecStart").getFirst().startsWith("/opt/rbridge/bin/rbridge "), e.getKey());
        }
        var memserver = units.get("rbridge-memserver.service");
        var bridge = units.get("rbridge-bridge.service");
        var attach = units.get("rbridge-attach@.service");
        assertEquals(List.of("rbridge"), memserver.get("Service.User"));
        for (var server : List.of(memserver, bridge)) {
            assertEquals(List.of("notify"), server.get("Service.Type"), "readiness is notified");
            assertEquals(List.of("main"), server.get("Service.NotifyAccess"));
        }
        assertEquals(List.of("rbridge"), bridge.get("Service.User"));
        assertEquals(List.of("/opt/rbridge/bin/rbridge serve --config /etc/rbridge/serve.conf"),
                bridge.get("Service.ExecStart"));
        assertEquals(List.of("root"), attach.get("Service.User"), "attach needs root (netlink, /dev/nbdX)");
        assertFalse(attach.containsKey("Service.PrivateDevices"), "PrivateDevices would hide /dev/nbdX from attach");
        assertFalse(attach.containsKey("Service.DevicePolicy"), "a DevicePolicy would deny /dev/nbdX");
        assertFalse(attach.containsKey("Service.ProtectKernelModules"), "ExecStartPre loads the nbd module");
        assertTrue(attach.get("Service.ExecStart").getFirst().contains(" attach --device /dev/%i "));
        assertEquals(List.of("/opt/rbridge/bin/rbridge detach /dev/%i"), attach.get("Service.ExecStop"));
        assertTrue(attach.get("Service.ExecStartPre").getFirst().contains("setup-nbd.sh"), "ExecStartPre loads nbd");
        assertTrue(attach.get("Unit.After").getFirst().contains("rbridge-bridge.service"));
        assertEquals(List.of("/etc/rbridge/attach-%i.env"), attach.get("Service.EnvironmentFile"));
        // The bridge's stop timeout covers the configured drain with room for the JVM to exit.
        int drain = Integer.parseInt(confValue(Files.readString(Deploy.DEPLOY.resolve("config/serve.conf")),
                "drain-timeout"));
        assertTrue(seconds(bridge.get("Service.TimeoutStopSec").getFirst()) >= drain + 10,
                "TimeoutStopSec of the bridge leaves 10 s beyond drain-timeout = " + drain);
    }

    /** memserver.env and serve.conf as shipped, with only their addresses moved to free local ports. */
    @Test
    void exampleConfigurationRunsWithTheInstalledLauncher() throws Exception {
        Path etc = root.resolve("etc/rbridge");
        String args = envValue(Files.readString(etc.resolve("memserver.env")), "RBRIDGE_MEMSERVER_ARGS");
        String launcher = root.resolve("opt/rbridge/bin/rbridge").toString();
        List<String> memservers = new ArrayList<>();
        List<String> msMetrics = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            int port = Deploy.freePort();
            int metrics = Deploy.freePort();
            List<String> cmd = new ArrayList<>(List.of(launcher, "memserver"));
            for (String a : args.split("\\s+")) {
                cmd.add(a.replace("0.0.0.0:7471", "127.0.0.1:" + port).replace("0.0.0.0:7474", "127.0.0.1:" + metrics)
                        .replace("/etc/rbridge/token", etc.resolve("token").toString()).replace("64G", "256M"));
            }
            cmd.addAll(List.of("--admin", "none"));
            Process p = start(cmd, "memserver" + i);
            memservers.add("127.0.0.1:" + port);
            msMetrics.add("127.0.0.1:" + metrics);
            Deploy.awaitHttp("127.0.0.1:" + metrics, "/readyz", 200, Duration.ofSeconds(60), p, log("memserver" + i));
        }
        int nbd = Deploy.freePort();
        int metrics = Deploy.freePort();
        int admin = Deploy.freePort();
        StringBuilder conf = new StringBuilder();
        int memserverLine = 0;
        for (String line : Files.readAllLines(etc.resolve("serve.conf"))) {
            String key =
                    line.contains("=") && !line.startsWith("#") ? line.substring(0, line.indexOf('=')).strip() : "";
            conf.append(switch (key) {
                case "memserver" -> "memserver = " + memservers.get(memserverLine++);
                case "token-file" -> "token-file = " + etc.resolve("token");
                case "listen" -> "listen = 127.0.0.1:" + nbd;
                case "unix" -> "unix = " + root.resolve("nbd.sock");
                case "metrics" -> "metrics = 127.0.0.1:" + metrics;
                case "admin" -> "admin = 127.0.0.1:" + admin;
                default -> line;
            }).append('\n');
        }
        assertEquals(2, memserverLine, "serve.conf lists two memservers");
        Path local = root.resolve("serve-local.conf");
        Files.writeString(local, conf);
        // systemd's side of Type=notify: a Unix datagram socket in NOTIFY_SOCKET that records what it is told.
        Path notifySocket = root.resolve("notify.sock");
        Files.deleteIfExists(notifySocket);
        Path notified = root.resolve("notified.txt");
        Process listener = new ProcessBuilder("python3", "-c", "import socket, sys\n"
                + "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\ns.bind(sys.argv[1])\n"
                + "for _ in range(2):\n    print(s.recv(4096).decode().replace('\\n', ' '), flush=True)\n",
                notifySocket.toString()).redirectErrorStream(true).redirectOutput(notified.toFile()).start();
        started.add(listener);
        for (int i = 0; i < 100 && !Files.exists(notifySocket); i++) {
            Thread.sleep(50);
        }
        ProcessBuilder serve = new ProcessBuilder(List.of(launcher, "serve", "--config", local.toString()))
                .redirectErrorStream(true).redirectOutput(log("bridge").toFile());
        serve.environment().put("NOTIFY_SOCKET", notifySocket.toString());
        Process bridge = serve.start();
        started.add(bridge);
        String ready = Deploy.awaitHttp("127.0.0.1:" + metrics, "/readyz", 200, Duration.ofSeconds(60), bridge,
                log("bridge"));
        assertTrue(ready.startsWith("ready"), ready);
        assertTrue(Files.exists(root.resolve("nbd.sock")), "the Unix socket from serve.conf");
        long t0 = System.nanoTime();
        int timeoutStop = seconds(parse(Deploy.DEPLOY.resolve("systemd/rbridge-bridge.service"))
                .get("Service.TimeoutStopSec").getFirst());
        assertTrue(Deploy.stop(bridge, Duration.ofSeconds(timeoutStop)),
                "the bridge stops on SIGTERM within TimeoutStopSec=" + timeoutStop + " s");
        System.out.printf("bridge stopped in %.1f s%n", (System.nanoTime() - t0) / 1e9);
        assertTrue(listener.waitFor(10, TimeUnit.SECONDS), "two notifications: " + Files.readString(notified));
        List<String> told = Files.readAllLines(notified);
        assertTrue(told.getFirst().startsWith("READY=1 STATUS=serving"), told.toString());
        assertEquals("STOPPING=1", told.get(1), told.toString());
        // A stop systemd asked for is a success: exit 0, not the JVM's 143 (which the unit would report as failed).
        assertEquals(0, bridge.exitValue(), "the bridge's exit status after SIGTERM");
        for (Process m : List.copyOf(started)) {
            if (m != bridge && m.isAlive()) {
                assertTrue(Deploy.stop(m, Duration.ofSeconds(30)));
                assertEquals(0, m.exitValue(), "a memserver's exit status after SIGTERM");
            }
        }
    }

    private Process start(List<String> cmd, String name) throws Exception {
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log(name).toFile()).start();
        started.add(p);
        return p;
    }

    private Path log(String name) {
        return root.resolve(name + ".log");
    }

    /** SECTION.Key -> values, in order (systemd's format, without line continuations, which the units do not use). */
    static Map<String, List<String>> parse(Path unit) throws Exception {
        Map<String, List<String>> out = new LinkedHashMap<>();
        String section = "";
        for (String raw : Files.readAllLines(unit)) {
            String line = raw.strip();
            if (line.isEmpty() || line.startsWith("#") || line.startsWith(";")) {
                continue;
            }
            if (line.startsWith("[")) {
                section = line.substring(1, line.indexOf(']'));
                continue;
            }
            int eq = line.indexOf('=');
            out.computeIfAbsent(section + "." + line.substring(0, eq).strip(), k -> new ArrayList<>())
                    .add(line.substring(eq + 1).strip());
        }
        return out;
    }

    private static int seconds(String span) {
        Matcher m = Pattern.compile("(\\d+)(s|min)?").matcher(span);
        assertTrue(m.matches(), "a time span in seconds or minutes: " + span);
        return Integer.parseInt(m.group(1)) * ("min".equals(m.group(2)) ? 60 : 1);
    }

    private static String confValue(String conf, String key) {
        return conf.lines().filter(l -> l.matches("\\s*" + Pattern.quote(key) + "\\s*=.*"))
                .map(l -> l.substring(l.indexOf('=') + 1).strip()).findFirst()
                .orElseThrow(() -> new AssertionError("no " + key + " in serve.conf"));
    }

    private static String envValue(String env, String key) {
        return env.lines().filter(l -> l.startsWith(key + "="))
                .map(l -> l.substring(key.length() + 1).strip()).findFirst()
                .orElseThrow(() -> new AssertionError("no " + key + " in memserver.env"));
    }
}
