package dev.rbridge.fuzz;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.parallel.Execution;
import org.junit.jupiter.api.parallel.ExecutionMode;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Fuzzes every target for {@value #SECONDS} seconds, each in a JVM of its own (Jazzer fuzzes one target per JVM), as
 * part of the full {@code ./test}: a change that breaks an invariant on inputs near the seeds shows up here, not only
 * when someone runs bench/fuzz.sh. A finding fails the target's run and Jazzer writes the input into the target's
 * regression folder, where it is replayed from then on. The run must also have executed inputs (libFuzzer's
 * "Done N runs"), so a target that silently stopped fuzzing fails too.
 */
@Tag("fuzz")
class FuzzBrieflyTest {
    static final int SECONDS = 5;
    private static final Pattern DONE = Pattern.compile("Done (\\d+) runs in");

    /** All targets, or those named in {@code -Drbridge.fuzz.targets=a,b} (to try one without the others' minutes). */
    static Stream<FuzzTargets.Target> targets() {
        String only = System.getProperty("rbridge.fuzz.targets", "");
        List<String> names = only.isBlank() ? List.of() : List.of(only.split(","));
        return FuzzTargets.ALL.stream().filter(t -> names.isEmpty() || names.contains(t.name()));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    // Two fuzzing JVMs at a time (fuzz/pom.xml), each keeping a core busy. On the method, not the class: the class
    // then ends only when every target has, so no other test class runs beside them.
    @Execution(ExecutionMode.CONCURRENT)
    @Timeout(SECONDS + 110) // JVM start and instrumentation on a loaded machine, well above what they take
    void fuzzBriefly(FuzzTargets.Target target) throws IOException, InterruptedException {
        List<String> command =
                new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                        "--enable-native-access=ALL-UNNAMED", "-cp", System.getProperty("java.class.path")));
        String hosts = System.getProperty("jdk.net.hosts.file");
        if (hosts != null) {
            command.add("-Djdk.net.hosts.file=" + hosts);
        }
        command.addAll(List.of(FuzzOne.class.getName(), target.testClass(), target.method()));
        Path log = Files.createTempFile("rbridge-fuzz-" + target.name() + "-", ".log");
        String output;
        try {
            ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile());
            pb.environment().put("JAZZER_FUZZ", "1");
            pb.environment().put("JAZZER_MAX_DURATION", SECONDS + "s");
            Process p = pb.start();
            try {
                assertTrue(p.waitFor(SECONDS + 90, TimeUnit.SECONDS), target.name() + ": the fuzzing JVM did not exit");
            } finally {
                p.destroyForcibly();
            }
            output = Files.readString(log, StandardCharsets.ISO_8859_1); // libFuzzer prints inputs as raw bytes
            assertEquals(0, p.exitValue(), target.name() + " found something or did not run:\n" + output);
        } finally {
            Files.deleteIfExists(log);
        }
        // Printed in the test's output, so a run's numbers can be read from the report.
        System.out.println(target.name() + ":\n"
                + output.lines().filter(l -> l.contains(" DONE ") || l.startsWith("Done")
                        || l.startsWith("FuzzOne") || l.contains("written to"))
                        .reduce("", (a, b) -> a + b + "\n"));
        Matcher m = DONE.matcher(output);
        assertTrue(m.find() && Long.parseLong(m.group(1)) > 0, target.name() + " executed no input:\n" + output);
    }
}
