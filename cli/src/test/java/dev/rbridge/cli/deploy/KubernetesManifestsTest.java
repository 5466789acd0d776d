package dev.rbridge.cli.deploy;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.rbridge.cli.Main;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.yaml.snakeyaml.Yaml;
import picocli.CommandLine;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.UnaryOperator;

/**
 * {@code deploy/kubernetes/manifests} checked without a cluster: {@code deploy/kubernetes/validate.mjs} (the
 * kubernetes-models OpenAPI schemas, unknown fields, references between the objects) must accept them and must reject
 * copies with one mistake each; and the manifests agree with rbridge itself: serve.conf in the ConfigMap names only
 * real {@code serve} options, the memserver's arguments are real {@code memserver} options, probes and Prometheus
 * annotations point at the ports the processes serve metrics on.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Tag("deploy")
class KubernetesManifestsTest {
    private static final Path K8S = Deploy.DEPLOY.resolve("kubernetes");
    private Path validator;

    @BeforeAll
    void installValidator() throws Exception {
        for (String tool : List.of("node", "npm")) {
            PeerTool.Result r = PeerTool.run(30, List.of("sh", "-c", "command -v " + tool));
            if (r.exitCode() != 0) {
                fail(tool
                        + " is missing: the Kubernetes manifest check runs deploy/kubernetes/validate.mjs with Node.js "
                        + "(apt-get install nodejs npm; Node 20 or newer) and installs its two npm packages");
            }
        }
        Path dir = Deploy.ROOT.resolve("cli/target/k8s-validate");
        Files.createDirectories(dir);
        for (String file : List.of("package.json", "package-lock.json", "validate.mjs")) {
            Files.copy(K8S.resolve(file), dir.resolve(file), StandardCopyOption.REPLACE_EXISTING);
        }
        // npm ci installs exactly what the committed lockfile names (and fails if package.json disagrees with it)
        PeerTool.Result r =
                PeerTool.run(300, List.of("npm", "ci", "--prefix", dir.toString(), "--no-audit", "--no-fund",
                        "--loglevel=error"));
        if (r.exitCode() != 0) {
            fail("npm ci of deploy/kubernetes/package-lock.json (kubernetes-models, yaml) failed; is the npm registry "
                    + "reachable?\n" + r.output());
        }
        validator = dir.resolve("validate.mjs");
    }

    @Test
    void manifestsConform() {
        PeerTool.Result r =
                PeerTool.run(120, List.of("node", validator.toString(), K8S.resolve("manifests").toString()));
        assertEquals(0, r.exitCode(), "validate.mjs:\n" + r.output());
        assertTrue(r.output().contains("conform"), r.output());
        for (String kind : List.of("Namespace", "Secret", "DaemonSet", "Deployment", "ConfigMap", "Service")) {
            assertTrue(r.output().contains(kind), kind + " validated:\n" + r.output());
        }
    }

    @Test
    void validatorRejectsOneMistakeEach() throws Exception {
        Map<String, UnaryOperator<String>> mistakes = new LinkedHashMap<>();
        mistakes.put("unknown field spec.template.spec.hostNetwrk", s -> s.replace("hostNetwork:", "hostNetwrk:"));
        mistakes.put("must be integer", s -> s.replace("containerPort: 7474", "containerPort: seven"));
        mistakes.put("does not name", s -> s.replace("port: metrics}", "port: metric}"));
        mistakes.put("selects no pod template",
                s -> s.replace("  selector:\n    app.kubernetes.io/name: rbridge-memserver",
                        "  selector:\n    app.kubernetes.io/name: rbridge-memservr"));
        mistakes.put("Secret rbridge-tokn", s -> s.replace("secretName: rbridge-token", "secretName: rbridge-tokn"));
        for (var m : mistakes.entrySet()) {
            Path dir = Files.createTempDirectory("k8s-broken");
            try {
                for (Path f : Files.list(K8S.resolve("manifests")).toList()) {
                    String text = Files.readString(f);
                    Files.writeString(dir.resolve(f.getFileName()),
                            f.getFileName().toString().equals("20-memserver.yaml") ? mustChange(m.getValue(), text)
                                    : text);
                }
                PeerTool.Result r = PeerTool.run(120, List.of("node", validator.toString(), dir.toString()));
                assertEquals(1, r.exitCode(),
                        "validate.mjs accepted a manifest with '" + m.getKey() + "':\n" + r.output());
                assertTrue(r.output().contains(m.getKey()), "the report names the mistake '" + m.getKey() + "':\n"
                        + r.output());
            } finally {
                PeerTool.run(30, List.of("rm", "-rf", dir.toString()));
            }
        }
    }

    @Test
    void theBaseAndTheExampleOverlayBuildAndConform() throws Exception {
        PeerTool.Result base = PeerTool.run(120, List.of("node", validator.toString(), K8S.toString()));
        assertEquals(0, base.exitCode(), "validate.mjs on the Kustomize base:\n" + base.output());
        assertEquals(built(K8S.resolve("manifests")).keySet(), built(K8S).keySet(),
                "kubectl apply -k deploy/kubernetes applies what apply -f manifests/ does");

        Path copy = kubernetesCopy();
        try {
            Path overlay = copy.resolve("overlays/example");
            PeerTool.Result noToken = PeerTool.run(120, List.of("node", validator.toString(), overlay.toString()));
            assertEquals(1, noToken.exitCode(), noToken.output());
            assertTrue(noToken.output().contains("file token does not exist"), noToken.output());

            Files.writeString(overlay.resolve("token"), "a-random-token-for-the-test\n");
            PeerTool.Result r = PeerTool.run(120, List.of("node", validator.toString(), overlay.toString()));
            assertEquals(0, r.exitCode(), "validate.mjs:\n" + r.output());
            Map<String, Map<String, Object>> built = built(overlay);
            Map<String, Object> ms = container(built.get("DaemonSet/rbridge-memserver"));
            assertTrue(((List<?>) ms.get("args")).contains("--capacity=16G"), "the overlay's patch applied: " + ms);
            assertEquals("a-random-token-for-the-test\n", get(built.get("Secret/rbridge-token"), "stringData", "token"),
                    "the token comes from the overlay's file");
            agreeWithRbridge(built);

            // A patch whose path is not in the base, and a base that does not list one of its files, are reported.
            Files.writeString(copy.resolve("manifests/40-extra.yaml"),
                    Files.readString(K8S.resolve("manifests/00-namespace.yaml")));
            Files.writeString(overlay.resolve("kustomization.yaml"), mustChange(s -> s.replace("containers/0/args/2",
                    "containers/0/args/12"), Files.readString(overlay.resolve("kustomization.yaml"))));
            PeerTool.Result bad = PeerTool.run(120, List.of("node", validator.toString(), overlay.toString()));
            assertEquals(1, bad.exitCode(), bad.output());
            assertTrue(bad.output().contains("args/12"), bad.output());
            assertTrue(bad.output().contains("40-extra.yaml is in manifests but not in resources"), bad.output());
        } finally {
            PeerTool.run(30, List.of("rm", "-rf", copy.toString()));
        }
    }

    /** deploy/kubernetes's manifests, base and overlays in a temporary folder (without any token file). */
    private static Path kubernetesCopy() throws Exception {
        Path copy = Files.createTempDirectory("k8s-copy");
        for (String sub : List.of("manifests", "overlays/example")) {
            Path to = Files.createDirectories(copy.resolve(sub));
            for (Path f : Files.list(K8S.resolve(sub)).filter(f -> f.toString().endsWith(".yaml")).toList()) {
                Files.copy(f, to.resolve(f.getFileName()));
            }
        }
        Files.copy(K8S.resolve("kustomization.yaml"), copy.resolve("kustomization.yaml"));
        return copy;
    }

    /** What validate.mjs --print says the folder applies (a Kustomize build, or the files as they are). */
    private Map<String, Map<String, Object>> built(Path dir) throws Exception {
        Process p = new ProcessBuilder("node", validator.toString(), "--print", dir.toString())
                .redirectError(ProcessBuilder.Redirect.DISCARD).start();
        String yaml = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, java.util.concurrent.TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), "validate.mjs --print " + dir);
        Map<String, Map<String, Object>> objects = new LinkedHashMap<>();
        for (Object o : new Yaml().loadAll(yaml)) {
            @SuppressWarnings("unchecked")
            Map<String, Object> doc = (Map<String, Object>) o;
            if (doc != null) {
                objects.put(doc.get("kind") + "/" + get(doc, "metadata", "name"), doc);
            }
        }
        return objects;
    }

    @Test
    void manifestsAgreeWithRbridge() throws Exception {
        agreeWithRbridge(built(K8S.resolve("manifests")));
    }

    private static void agreeWithRbridge(Map<String, Map<String, Object>> objects) {
        CommandLine rbridge = new CommandLine(new Main());
        CommandLine.Model.CommandSpec serve = rbridge.getSubcommands().get("serve").getCommandSpec();
        CommandLine.Model.CommandSpec memserver = rbridge.getSubcommands().get("memserver").getCommandSpec();

        String serveConf = (String) get(objects.get("ConfigMap/rbridge-serve"), "data", "serve.conf");
        assertNotNull(serveConf, "ConfigMap rbridge-serve has serve.conf");
        Map<String, String> conf = new LinkedHashMap<>();
        for (String line : serveConf.lines().map(String::strip).filter(l -> !l.isEmpty() && !l.startsWith("#"))
                .toList()) {
            int eq = line.indexOf('=');
            String key = (eq < 0 ? line : line.substring(0, eq)).strip(); // a flag alone: `insecure`
            assertNotNull(serve.findOption("--" + key),
                    "serve.conf in the ConfigMap: '" + key + "' is no serve option");
            conf.put(key, eq < 0 ? "" : line.substring(eq + 1).strip());
        }
        Map<String, Object> bridge = container(objects.get("Deployment/rbridge-bridge"));
        assertEquals(List.of("serve", "--config", "/etc/rbridge/serve.conf"), bridge.get("args"));
        assertEquals("0.0.0.0:" + port(bridge, "metrics"), conf.get("metrics"), "probes reach the bridge's metrics");
        assertEquals("0.0.0.0:" + port(bridge, "nbd"), conf.get("listen"));
        assertEquals(conf.get("token-file"), "/etc/rbridge/secret/token");
        assertProbes(bridge);
        assertEquals(String.valueOf(port(bridge, "metrics")),
                get(objects.get("Deployment/rbridge-bridge"), "spec", "template", "metadata", "annotations",
                        "prometheus.io/port"));

        Map<String, Object> ds = objects.get("DaemonSet/rbridge-memserver");
        Map<String, Object> ms = container(ds);
        @SuppressWarnings("unchecked")
        List<String> args = (List<String>) ms.get("args");
        assertEquals("memserver", args.getFirst());
        Map<String, String> msArgs = new LinkedHashMap<>();
        for (String a : args.subList(1, args.size())) {
            String name = a.contains("=") ? a.substring(0, a.indexOf('=')) : a;
            assertNotNull(memserver.findOption(name), "DaemonSet: '" + name + "' is no memserver option");
            msArgs.put(name, a.contains("=") ? a.substring(a.indexOf('=') + 1) : "");
        }
        assertEquals("0.0.0.0:" + port(ms, "metrics"), msArgs.get("--metrics"));
        assertEquals("0.0.0.0:" + port(ms, "rdma"), msArgs.get("--listen"));
        assertEquals("/etc/rbridge/secret/token", msArgs.get("--token-file"));
        assertProbes(ms);
        assertEquals(String.valueOf(port(ms, "metrics")),
                get(ds, "spec", "template", "metadata", "annotations", "prometheus.io/port"));
        assertEquals("true", get(ds, "spec", "template", "metadata", "annotations", "prometheus.io/scrape"));
        @SuppressWarnings("unchecked")
        List<String> caps = (List<String>) get(ms, "securityContext", "capabilities", "add");
        assertEquals(List.of("IPC_LOCK"), caps, "memserver: IPC_LOCK for --mlock");
        if (msArgs.containsKey("--huge-pages")) {
            assertNotNull(get(ms, "resources", "limits", "hugepages-2Mi"), "--huge-pages needs a hugepages-2Mi limit");
            String capacity = msArgs.get("--capacity");
            assertEquals(capacity.endsWith("G") ? capacity + "i" : capacity,
                    get(ms, "resources", "limits", "hugepages-2Mi"), "--huge-pages: the pool covers --capacity");
        }
        // The preStop hook is a real admin command that drains this memserver and waits: a rolling update (one pod
        // at a time) then never takes a slab's last live replica (MembershipTest runs the same sequence).
        @SuppressWarnings("unchecked")
        List<String> hook = (List<String>) get(ms, "lifecycle", "preStop", "exec", "command");
        assertNotNull(hook, "the memserver has a preStop hook");
        assertEquals("/opt/rbridge/bin/rbridge", hook.getFirst(), "the image's launcher");
        CommandLine.ParseResult parsed = new CommandLine(new Main()).parseArgs(hook.subList(1, hook.size())
                .toArray(String[]::new));
        CommandLine.ParseResult admin = parsed.subcommand();
        assertEquals("admin", admin.commandSpec().name());
        assertTrue(admin.hasMatchedOption("--wait"), "preStop waits for the drain: " + hook);
        assertEquals("drain", admin.matchedPositionalValue(0, ""));
        String memserverAdmin = msArgs.getOrDefault("--admin",
                String.valueOf(memserver.findOption("--admin").initialValue())); // loopback, where the token may go
        assertEquals(memserverAdmin, admin.matchedOptionValue("--memserver", ""),
                "the hook reaches the memserver's admin interface");
        assertTrue(memserverAdmin.startsWith("127.0.0.1:"), memserverAdmin);
        Object tokenFile = admin.matchedOptionValue("--token-file", null);
        assertEquals("/etc/rbridge/secret/token", String.valueOf(tokenFile));
        assertEquals("RollingUpdate", get(ds, "spec", "updateStrategy", "type"));
        assertEquals(1, get(ds, "spec", "updateStrategy", "rollingUpdate", "maxUnavailable"));
        assertTrue((Integer) get(ds, "spec", "template", "spec", "terminationGracePeriodSeconds") >= 300,
                "the grace period leaves the preStop drain time to move a memserver's replicas");
        // Every memserver line of serve.conf uses the memserver's published port.
        @SuppressWarnings("unchecked")
        int published = (Integer) ((List<Map<String, Object>>) get(ms, "ports")).stream()
                .filter(p -> "rdma".equals(p.get("name"))).findFirst().orElseThrow().get("hostPort");
        for (String line : serveConf.lines().filter(l -> l.startsWith("memserver")).toList()) {
            assertTrue(line.endsWith(":" + published), "serve.conf addresses memservers on hostPort " + published
                    + ": " + line);
        }
    }

    private static void assertProbes(Map<String, Object> container) {
        assertEquals("/healthz", get(container, "livenessProbe", "httpGet", "path"));
        assertEquals("metrics", get(container, "livenessProbe", "httpGet", "port"));
        assertEquals("/readyz", get(container, "readinessProbe", "httpGet", "path"));
        assertEquals("metrics", get(container, "readinessProbe", "httpGet", "port"));
    }

    private static String mustChange(UnaryOperator<String> edit, String text) {
        String changed = edit.apply(text);
        if (changed.equals(text)) {
            fail("the test's edit did not apply to 20-memserver.yaml; update the test to the manifest");
        }
        return changed;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> container(Map<String, Object> workload) {
        assertNotNull(workload, "workload missing from the manifests");
        return ((List<Map<String, Object>>) get(workload, "spec", "template", "spec", "containers")).getFirst();
    }

    @SuppressWarnings("unchecked")
    private static int port(Map<String, Object> container, String name) {
        return (Integer) ((List<Map<String, Object>>) container.get("ports")).stream()
                .filter(p -> name.equals(p.get("name"))).findFirst()
                .orElseThrow(() -> new AssertionError("no container port named " + name)).get("containerPort");
    }

    @SuppressWarnings("unchecked")
    private static Object get(Map<String, Object> doc, String... path) {
        Object o = doc;
        for (String p : path) {
            if (!(o instanceof Map<?, ?> m)) {
                return null;
            }
            o = ((Map<String, Object>) m).get(p);
        }
        return o;
    }
}
