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
                fail(tool + " is missing: the Kubernetes manifest check runs deploy/kubernetes/validate.mjs with Node.js "
                        + "(apt-get install nodejs npm; Node 20 or newer) and installs its two npm packages");
            }
        }
        Path dir = Deploy.ROOT.resolve("cli/target/k8s-validate");
        Files.createDirectories(dir);
        Files.copy(K8S.resolve("package.json"), dir.resolve("package.json"),
                StandardCopyOption.REPLACE_EXISTING);
        Files.copy(K8S.resolve("validate.mjs"), dir.resolve("validate.mjs"),
                StandardCopyOption.REPLACE_EXISTING);
        PeerTool.Result r = PeerTool.run(300, List.of("npm", "install", "--prefix", dir.toString(), "--no-audit", "--no-fund",
                "--no-save", "--loglevel=error"));
        if (r.exitCode() != 0) {
            fail("npm install of deploy/kubernetes/package.json (kubernetes-models, yaml) failed; is the npm registry "
                    + "reachable?\n" + r.output());
        }
        validator = dir.resolve("validate.mjs");
    }

    @Test
    void manifestsConform() {
        PeerTool.Result r = PeerTool.run(120, List.of("node", validator.toString(), K8S.resolve("manifests").toString()));
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
        mistakes.put("selects no pod template", s -> s.replace("  selector:\n    app.kubernetes.io/name: rbridge-memserver",
                "  selector:\n    app.kubernetes.io/name: rbridge-memservr"));
        mistakes.put("Secret rbridge-tokn", s -> s.replace("secretName: rbridge-token", "secretName: rbridge-tokn"));
        for (var m : mistakes.entrySet()) {
            Path dir = Files.createTempDirectory("k8s-broken");
            try {
                for (Path f : Files.list(K8S.resolve("manifests")).toList()) {
                    String text = Files.readString(f);
                    Files.writeString(dir.resolve(f.getFileName()),
                            f.getFileName().toString().equals("20-memserver.yaml") ? mustChange(m.getValue(), text) : text);
                }
                PeerTool.Result r = PeerTool.run(120, List.of("node", validator.toString(), dir.toString()));
                assertEquals(1, r.exitCode(), "validate.mjs accepted a manifest with '" + m.getKey() + "':\n" + r.output());
                assertTrue(r.output().contains(m.getKey()), "the report names the mistake '" + m.getKey() + "':\n"
                        + r.output());
            } finally {
                PeerTool.run(30, List.of("rm", "-rf", dir.toString()));
            }
        }
    }

    @Test
    void manifestsAgreeWithRbridge() throws Exception {
        Map<String, Map<String, Object>> objects = new LinkedHashMap<>();
        for (Path f : Files.list(K8S.resolve("manifests")).sorted().toList()) {
            for (Object o : new Yaml().loadAll(Files.readString(f))) {
                @SuppressWarnings("unchecked")
                Map<String, Object> doc = (Map<String, Object>) o;
                if (doc != null) {
                    objects.put(doc.get("kind") + "/" + get(doc, "metadata", "name"), doc);
                }
            }
        }
        CommandLine rbridge = new CommandLine(new Main());
        CommandLine.Model.CommandSpec serve = rbridge.getSubcommands().get("serve").getCommandSpec();
        CommandLine.Model.CommandSpec memserver = rbridge.getSubcommands().get("memserver").getCommandSpec();

        String serveConf = (String) get(objects.get("ConfigMap/rbridge-serve"), "data", "serve.conf");
        assertNotNull(serveConf, "ConfigMap rbridge-serve has serve.conf");
        Map<String, String> conf = new LinkedHashMap<>();
        for (String line : serveConf.lines().map(String::strip).filter(l -> !l.isEmpty() && !l.startsWith("#")).toList()) {
            int eq = line.indexOf('=');
            String key = (eq < 0 ? line : line.substring(0, eq)).strip(); // a flag alone: `insecure`
            assertNotNull(serve.findOption("--" + key), "serve.conf in the ConfigMap: '" + key + "' is no serve option");
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
        }
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
