package dev.rbridge.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link Signals} reaches the JDK's signal handling by reflection: a handler it installs runs when the signal comes,
 * it tells a signal the process was started ignoring (as under nohup) from one it was not, and a signal it cannot
 * handle is refused as the JDK refuses it. SIGWINCH stands in for SIGTERM and SIGHUP where this JVM is signalled: its
 * default is to do nothing.
 */
@Timeout(60)
class SignalsTest {
    private static void kill(String signal, long pid) throws Exception {
        Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(pid)).inheritIO().start();
        assertTrue(kill.waitFor(30, TimeUnit.SECONDS), "kill did not end");
        assertEquals(0, kill.exitValue(), "kill -" + signal + " " + pid);
    }

    @Test
    void aHandledSignalRunsTheAction() throws Exception {
        CountDownLatch ran = new CountDownLatch(1);
        assertFalse(Signals.handle("WINCH", ran::countDown), "SIGWINCH is not ignored in the test JVM");
        kill("WINCH", ProcessHandle.current().pid());
        assertTrue(ran.await(30, TimeUnit.SECONDS), "the handler did not run within 30 s of SIGWINCH");
    }

    @Test
    void aSignalTheProcessWasStartedIgnoringIsReportedIgnored() throws Exception {
        Process probe = new ProcessBuilder("env", "--ignore-signal=HUP",
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-cp", System.getProperty("java.class.path"), IgnoredProbe.class.getName())
                .redirectErrorStream(true).start();
        String out = new String(probe.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
        assertTrue(probe.waitFor(30, TimeUnit.SECONDS), "the probe JVM did not end");
        assertEquals("ignored before: true", out);
    }

    @Test
    void anUnknownSignalIsRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> Signals.handle("NOSUCHSIGNAL", () -> {
                }));
        assertTrue(e.getMessage().contains("NOSUCHSIGNAL"), e.getMessage());
    }

    /** Run under {@code env --ignore-signal=HUP}, as nohup runs a command: says what {@link Signals#handle} answers. */
    public static final class IgnoredProbe {
        private IgnoredProbe() {}

        public static void main(String[] args) {
            System.out.println("ignored before: " + Signals.handle("HUP", () -> {
            }));
        }
    }
}
