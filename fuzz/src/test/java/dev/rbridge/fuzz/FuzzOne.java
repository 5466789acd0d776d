package dev.rbridge.fuzz;

import static org.junit.platform.engine.discovery.DiscoverySelectors.selectMethod;

import java.io.PrintWriter;
import java.lang.reflect.Method;
import java.util.Arrays;
import java.util.Map;

import org.junit.platform.launcher.LauncherDiscoveryRequest;
import org.junit.platform.launcher.core.LauncherDiscoveryRequestBuilder;
import org.junit.platform.launcher.core.LauncherFactory;
import org.junit.platform.launcher.listeners.SummaryGeneratingListener;
import org.junit.platform.launcher.listeners.TestExecutionSummary;

/**
 * Runs one @FuzzTest method through the JUnit platform in this JVM, which fuzzes when the environment says
 * {@code JAZZER_FUZZ=1}; exits 0 when it found nothing, 1 when it did (the finding printed), 2 when nothing ran.
 * Jazzer fuzzes once per JVM, so {@link FuzzBrieflyTest} starts one of these per target.
 *
 * <p>Usage: {@code FuzzOne TEST-CLASS METHOD}
 */
public final class FuzzOne {
    private FuzzOne() {}

    public static void main(String[] args) throws ClassNotFoundException {
        Class<?> test = Class.forName(args[0]);
        Method method = Arrays.stream(test.getDeclaredMethods()).filter(m -> m.getName().equals(args[1])).findFirst()
                .orElseThrow(() -> new IllegalArgumentException(args[0] + " has no method " + args[1]));
        LauncherDiscoveryRequest request = LauncherDiscoveryRequestBuilder.request()
                .selectors(selectMethod(test, method))
                // libFuzzer's per-input timeout comes from this; JUnit must not also time out the whole run
                .configurationParameters(Map.of(
                        "junit.jupiter.execution.timeout.testtemplate.method.default", "10 s",
                        "junit.jupiter.execution.timeout.mode", "disabled"))
                .build();
        SummaryGeneratingListener listener = new SummaryGeneratingListener();
        LauncherFactory.create().execute(request, listener);
        TestExecutionSummary summary = listener.getSummary();
        summary.printFailuresTo(new PrintWriter(System.out, true), 20);
        System.out.println("FuzzOne: " + summary.getTestsSucceededCount() + " succeeded, "
                + summary.getTotalFailureCount() + " failed");
        System.exit(summary.getTestsStartedCount() == 0 ? 2 : summary.getTotalFailureCount() > 0 ? 1 : 0);
    }
}
