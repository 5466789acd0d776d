package dev.rbridge.cli.deploy;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import org.yaml.snakeyaml.Yaml;

import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * Builds the container image with {@code deploy/container/build-image.sh} from this build's jar (the Debian rootfs and
 * the jlink runtime come from the script's cache after the first run), then checks it the way {@code docker load} and
 * a container runtime would, without either: the manifest names a config whose file name is its sha256, the config's
 * diff_ids are the sha256 of each layer tar in order, and the layers unpacked in order (whiteouts applied) make a
 * rootfs in which the ENTRYPOINT, run as the image's USER with its Env and WorkingDir in fresh mount and PID
 * namespaces ({@code unshare}, {@code chroot}, a tmpfs /dev with the usual nodes, /proc), prints rbridge's help,
 * and a memserver and a bridge started from it serve /healthz and /readyz.
 */
@Tag("deploy")
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ContainerImageTest {
    /** Sets up what a container runtime gives a container, then runs "$@" in the rootfs as USER:GROUP. */
    private static final String CONTAINER = """
            set -euo pipefail
            r="$1" uid="$2" gid="$3"; shift 3
            mount -t tmpfs -o mode=0755,size=1m tmpfs "$r/dev"
            for d in null zero full random urandom tty; do : >"$r/dev/$d"; mount --bind "/dev/$d" "$r/dev/$d"; done
            mkdir "$r/dev/shm" "$r/dev/pts"
            mount -t tmpfs -o mode=1777,size=64m tmpfs "$r/dev/shm"
            ln -s /proc/self/fd "$r/dev/fd"
            mount -t proc proc "$r/proc"
            exec chroot --userspec="$uid:$gid" --groups="$gid" "$r" "$@"
            """;

    private Path work;
    private Path archive;
    private Path rootfs;
    private Map<String, Object> config;
    private Map<String, Object> containerConfig;
    private final List<Process> started = new ArrayList<>();

    @BeforeAll
    void build() throws Exception {
        Deploy.requireJar();
        Deploy.requireRoot("debootstrap and chroot build the image, and the image runs in a chroot");
        Deploy.require("debootstrap", "debootstrap");
        Deploy.require("unshare", "util-linux");
        work = Deploy.ROOT.resolve("cli/target/container-image-test");
        PeerTool.check(120, "rm", "-rf", "--one-file-system", work.toString());
        Files.createDirectories(work);
        Path image = work.resolve("rbridge-image.tar");
        long t0 = System.nanoTime();
        // The first build makes the Debian rootfs (debootstrap, about 2 minutes); later ones reuse the cache.
        String out = PeerTool.check(900, Deploy.DEPLOY.resolve("container/build-image.sh").toString(),
                "--jar", Deploy.JAR.toString(), "--output", image.toString());
        System.out.printf("build-image.sh: %.1f s, %d MiB%n%s", (System.nanoTime() - t0) / 1e9,
                Files.size(image) >> 20, out);
        archive = work.resolve("archive");
        Files.createDirectories(archive);
        PeerTool.check(120, "tar", "-xf", image.toString(), "-C", archive.toString());
    }

    @AfterAll
    void cleanUp() throws Exception {
        for (Process p : started) {
            stopContainer(p, Duration.ofSeconds(10));
        }
        if (work != null && Files.isDirectory(work)) {
            PeerTool.run(120, List.of("rm", "-rf", "--one-file-system", work.toString()));
        }
    }

    @Test
    @Order(1)
    void manifestConfigAndDiffIdsAreConsistent() throws Exception {
        Yaml json = new Yaml(); // JSON is YAML
        List<Map<String, Object>> manifest = json.load(Files.readString(archive.resolve("manifest.json")));
        assertEquals(1, manifest.size(), "manifest.json has one image");
        Map<String, Object> entry = manifest.getFirst();
        String configName = (String) entry.get("Config");
        Path configFile = archive.resolve(configName);
        assertTrue(Files.isRegularFile(configFile), "manifest names config " + configName + ", not in the archive");
        assertEquals(configName, Deploy.sha256(configFile) + ".json",
                "the config's file name is its sha256 (image id)");
        assertEquals(List.of("rbridge:" + projectVersion()), entry.get("RepoTags"));

        config = json.load(Files.readString(configFile));
        assertEquals("linux", config.get("os"));
        assertEquals("amd64", config.get("architecture"));
        @SuppressWarnings("unchecked")
        Map<String, Object> rootfsSection = (Map<String, Object>) config.get("rootfs");
        assertEquals("layers", rootfsSection.get("type"));
        @SuppressWarnings("unchecked")
        List<String> diffIds = (List<String>) rootfsSection.get("diff_ids");
        @SuppressWarnings("unchecked")
        List<String> layers = (List<String>) entry.get("Layers");
        assertEquals(3, layers.size(), "layers: Debian rootfs, Java runtime, rbridge");
        assertEquals(layers.size(), diffIds.size(), "one diff_id per layer");
        for (int i = 0; i < layers.size(); i++) {
            Path layer = archive.resolve(layers.get(i));
            assertTrue(Files.isRegularFile(layer), "layer " + layers.get(i) + " is in the archive");
            assertEquals(diffIds.get(i), "sha256:" + Deploy.sha256(layer),
                    "diff_id " + i + " is the sha256 of the uncompressed layer tar " + layers.get(i));
        }
        assertEquals(layers.size(), ((List<?>) config.get("history")).size(), "one history entry per layer");

        @SuppressWarnings("unchecked")
        Map<String, Object> c = (Map<String, Object>) config.get("config");
        containerConfig = c;
        assertEquals(List.of("/opt/rbridge/bin/rbridge"), c.get("Entrypoint"));
        String user = (String) c.get("User");
        assertTrue(user.matches("[1-9][0-9]*:[0-9]+"), "User is a numeric non-root uid:gid, got " + user);
        @SuppressWarnings("unchecked")
        Map<String, Object> ports = (Map<String, Object>) c.get("ExposedPorts");
        assertEquals(List.of("10809/tcp", "7471/tcp", "7474/tcp", "7475/tcp"),
                ports.keySet().stream().sorted().toList());
        @SuppressWarnings("unchecked")
        Map<String, String> labels = (Map<String, String>) c.get("Labels");
        assertEquals("rbridge", labels.get("org.opencontainers.image.title"));
        assertEquals(projectVersion(), labels.get("org.opencontainers.image.version"));
        assertTrue(((List<?>) c.get("Env")).contains("UCX_ERROR_SIGNALS="), "Env keeps UCX off the JVM's signals");
    }

    /**
     * deploy/container/Dockerfile builds the same image with docker build (no container builder runs here): its
     * entrypoint, command, user, working directory, ports, environment, labels and Debian packages are those of the
     * image the script built.
     */
    @Test
    @Order(2)
    @SuppressWarnings("unchecked")
    void theDockerfileDescribesTheSameImage() throws Exception {
        assertTrue(containerConfig != null, "the image config was read");
        String dockerfile = Files.readString(Deploy.DEPLOY.resolve("container/Dockerfile")).replace("\\\n", " ");
        Map<String, String> last = new LinkedHashMap<>();
        for (String line : dockerfile.lines().map(String::strip).filter(l -> !l.startsWith("#")).toList()) {
            int sp = line.indexOf(' ');
            if (sp > 0) {
                last.put(line.substring(0, sp), line.substring(sp + 1).strip());
            }
        }
        Yaml json = new Yaml();
        assertEquals(containerConfig.get("Entrypoint"), json.load(last.get("ENTRYPOINT")));
        assertEquals(containerConfig.get("Cmd"), json.load(last.get("CMD")));
        assertEquals(containerConfig.get("User"), last.get("USER"));
        assertEquals(containerConfig.get("WorkingDir"), last.get("WORKDIR"));
        assertEquals(((Map<String, Object>) containerConfig.get("ExposedPorts")).keySet().stream().sorted().toList(),
                List.of(last.get("EXPOSE").split("\\s+")).stream().sorted().toList());
        List<String> env = new ArrayList<>();
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("(\\w+)=(\\S*)").matcher(last.get("ENV"));
        while (m.find()) {
            env.add(m.group(1) + "=" + m.group(2));
        }
        assertEquals(containerConfig.get("Env"), env);
        Map<String, String> labels = (Map<String, String>) containerConfig.get("Labels");
        for (String key : List.of("org.opencontainers.image.title", "org.opencontainers.image.description",
                "dev.rbridge.ports")) {
            assertTrue(last.get("LABEL").contains(key + "=\"" + labels.get(key) + "\""),
                    key + ": " + last.get("LABEL"));
        }
        String script = Files.readString(Deploy.DEPLOY.resolve("container/build-image.sh"));
        java.util.regex.Matcher pk = java.util.regex.Pattern.compile("(?m)^packages=\"([^\"]+)\"").matcher(script);
        assertTrue(pk.find(), "build-image.sh names its packages");
        for (String pkg : pk.group(1).split(",")) {
            assertTrue(dockerfile.contains(" " + pkg), "the Dockerfile installs " + pkg);
        }
    }

    @Test
    @Order(3)
    void layersUnpackIntoARunnableRootfs() throws Exception {
        if (config == null) {
            fail("the manifest check failed; nothing to unpack");
        }
        rootfs = work.resolve("rootfs");
        Files.createDirectories(rootfs);
        @SuppressWarnings("unchecked")
        List<String> diffIds = (List<String>) ((Map<String, Object>) config.get("rootfs")).get("diff_ids");
        for (String id : diffIds) {
            unpack(archive.resolve(id.substring("sha256:".length())).resolve("layer.tar"));
        }
        Path launcher = rootfs.resolve("opt/rbridge/bin/rbridge");
        assertTrue(Files.getPosixFilePermissions(launcher).contains(PosixFilePermission.OTHERS_EXECUTE),
                "the ENTRYPOINT is executable by everyone");
        assertTrue(Files.isRegularFile(rootfs.resolve("opt/rbridge/lib/rbridge.jar")));
        assertEquals(Deploy.sha256(Deploy.JAR), Deploy.sha256(rootfs.resolve("opt/rbridge/lib/rbridge.jar")),
                "the image carries this build's jar");
        assertTrue(Files.isExecutable(rootfs.resolve("opt/rbridge/jre/bin/java")), "the jlink runtime is there");
        assertFalse(Files.exists(rootfs.resolve("opt/rbridge/jre/bin/javac")), "a runtime, not a JDK");
        for (String lib : List.of("libucp.so.0", "libuct.so.0", "libibverbs.so.1")) {
            assertTrue(Files.exists(rootfs.resolve("usr/lib/x86_64-linux-gnu/" + lib)), lib + " for the ucx transport");
        }
        assertTrue(Files.readString(rootfs.resolve("etc/os-release")).contains("VERSION_ID=\"12\""), "Debian 12");
        String uid = ((String) containerConfig.get("User")).split(":")[0];
        assertTrue(Files.readAllLines(rootfs.resolve("etc/passwd")).stream().anyMatch(l -> l.split(":")[2].equals(uid)),
                "the image's /etc/passwd has its USER " + uid);
        assertEquals(Integer.parseInt(uid), Files.getAttribute(rootfs.resolve("var/lib/rbridge"), "unix:uid"),
                "the WorkingDir belongs to the USER");
    }

    @Test
    @Order(5)
    void entrypointPrintsHelp() throws Exception {
        PeerTool.Result r = runInContainer(List.of("--help"));
        assertEquals(0, r.exitCode(), "rbridge --help in the image:\n" + r.output());
        assertTrue(r.output().contains("Usage: rbridge"), r.output());
        for (String command : List.of("serve", "memserver", "attach", "demo")) {
            assertTrue(r.output().contains("  " + command + " "), "help lists " + command + ":\n" + r.output());
        }
        @SuppressWarnings("unchecked")
        List<String> cmd = (List<String>) containerConfig.get("Cmd");
        PeerTool.Result byDefault = runInContainer(cmd);
        assertEquals(0, byDefault.exitCode(), "the image's default Cmd " + cmd + ":\n" + byDefault.output());
        assertTrue(byDefault.output().contains("Usage: rbridge"), byDefault.output());
    }

    @Test
    @Order(6)
    void memserverHelp() throws Exception {
        PeerTool.Result r = runInContainer(List.of("memserver", "--help"));
        assertEquals(0, r.exitCode(), "rbridge memserver --help in the image:\n" + r.output());
        assertTrue(r.output().contains("Usage: rbridge memserver"), r.output());
        assertTrue(r.output().contains("--huge-pages"), r.output());
    }

    /** The runtime has every module the servers need (jlink keeps only what jdeps found plus a few). */
    @Test
    @Order(7)
    void memserverAndBridgeServeFromTheImage() throws Exception {
        int rdma = Deploy.freePort();
        int msMetrics = Deploy.freePort();
        int nbd = Deploy.freePort();
        int brMetrics = Deploy.freePort();
        Path msLog = work.resolve("memserver.log");
        Process ms = startInContainer(List.of("memserver", "--listen", "127.0.0.1:" + rdma, "--capacity", "256M",
                "--token", "image-test", "--admin", "none", "--metrics", "127.0.0.1:" + msMetrics), msLog);
        Deploy.awaitHttp("127.0.0.1:" + msMetrics, "/healthz", 200, Duration.ofSeconds(60), ms, msLog);
        Path brLog = work.resolve("bridge.log");
        Process br = startInContainer(List.of("serve", "--memserver", "127.0.0.1:" + rdma, "--token", "image-test",
                "--volume", "disk,size=64M", "--listen", "127.0.0.1:" + nbd, "--admin", "none",
                "--metrics", "127.0.0.1:" + brMetrics), brLog);
        String ready = Deploy.awaitHttp("127.0.0.1:" + brMetrics, "/readyz", 200, Duration.ofSeconds(60), br, brLog);
        assertTrue(ready.startsWith("ready"), ready);
        String metrics = Deploy.awaitHttp("127.0.0.1:" + brMetrics, "/metrics", 200, Duration.ofSeconds(10), br, brLog);
        assertTrue(metrics.contains("rbridge_memserver_reachable"), "bridge metrics from the image");
        assertTrue(metrics.contains("process_cpu"), "process metrics (jdk.management is in the runtime)");
        assertTrue(stopContainer(br, Duration.ofSeconds(30)), "the bridge stops on SIGTERM");
        assertTrue(stopContainer(ms, Duration.ofSeconds(30)), "the memserver stops on SIGTERM");
    }

    /**
     * {@code docker stop}: SIGTERM to the container's PID 1 (the JVM, which unshare forked; unshare itself ignores
     * SIGTERM), then SIGKILL after the grace period. True if it ended on SIGTERM.
     */
    private static boolean stopContainer(Process unshare, Duration grace) throws InterruptedException {
        unshare.children().forEach(ProcessHandle::destroy);
        if (unshare.waitFor(grace.toMillis(), TimeUnit.MILLISECONDS)) {
            return true;
        }
        Deploy.stop(unshare, Duration.ZERO);
        return false;
    }

    private PeerTool.Result runInContainer(List<String> args) {
        return PeerTool.run(120, containerCommand(args));
    }

    private Process startInContainer(List<String> args, Path log) throws Exception {
        Process p = new ProcessBuilder(containerCommand(args)).redirectErrorStream(true).redirectOutput(log.toFile())
                .start();
        started.add(p);
        return p;
    }

    /** unshare + chroot with the image config's USER, Env, WorkingDir and ENTRYPOINT, then {@code args}. */
    private List<String> containerCommand(List<String> args) {
        if (rootfs == null || containerConfig == null) {
            fail("the image was not unpacked (an earlier check failed)");
        }
        String[] user = ((String) containerConfig.get("User")).split(":");
        List<String> cmd = new ArrayList<>(List.of("unshare", "--mount", "--pid", "--fork", "--kill-child",
                "bash", "-c", CONTAINER, "container", rootfs.toString(), user[0], user[1],
                "/usr/bin/env", "-i", "-C", (String) containerConfig.get("WorkingDir"), "HOME=/var/lib/rbridge"));
        @SuppressWarnings("unchecked")
        List<String> env = (List<String>) containerConfig.get("Env");
        cmd.addAll(env);
        @SuppressWarnings("unchecked")
        List<String> entrypoint = (List<String>) containerConfig.get("Entrypoint");
        cmd.addAll(entrypoint);
        cmd.addAll(args);
        return cmd;
    }

    /** Unpacks one layer over the rootfs as an image runtime does: whiteouts first remove what lower layers had. */
    private void unpack(Path layer) throws Exception {
        for (String entry : PeerTool.check(120, "tar", "-tf", layer.toString()).lines().toList()) {
            String path = entry.startsWith("./") ? entry.substring(2) : entry;
            int slash = path.lastIndexOf('/');
            String dir = slash < 0 ? "" : path.substring(0, slash + 1);
            String name = path.substring(slash + 1);
            if (name.equals(".wh..wh..opq")) {
                Path d = rootfs.resolve(dir);
                if (Files.isDirectory(d)) {
                    try (Stream<Path> s = Files.list(d)) {
                        for (Path p : s.toList()) {
                            deleteTree(p);
                        }
                    }
                }
            } else if (name.startsWith(".wh.")) {
                deleteTree(rootfs.resolve(dir + name.substring(".wh.".length())));
            }
        }
        PeerTool.check(300, "tar", "-xf", layer.toString(), "-C", rootfs.toString(), "--numeric-owner",
                "--same-permissions", "--same-owner", "--exclude=.wh.*", "--exclude=*/.wh.*");
    }

    private static void deleteTree(Path p) throws Exception {
        if (!Files.exists(p, LinkOption.NOFOLLOW_LINKS)) {
            return;
        }
        try (Stream<Path> s = Files.walk(p)) {
            for (Path q : s.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(q);
            }
        }
    }

    private static String projectVersion() throws Exception {
        String pom = Files.readString(Deploy.ROOT.resolve("cli/pom.xml"));
        int parent = pom.indexOf("<parent>");
        int start = pom.indexOf("<version>", parent) + "<version>".length();
        return pom.substring(start, pom.indexOf("</version>", start)).strip();
    }
}
