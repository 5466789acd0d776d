package dev.rbridge.rdma.ucx;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * libucs installs UCX's own SIGSEGV handler as it loads unless UCX_ERROR_SIGNALS is empty, and the JVM then dies of
 * its next implicit null check ("SIGSEGV ... sent by kill"; seen in the rdma unit tests once the check that UCX is
 * installed opened libucp first). A fresh JVM, without UCX_ERROR_SIGNALS in its environment, must keep its own
 * handler across that check.
 */
@Timeout(120)
class UcxSignalHandlersTest {
    @Test
    void openingUcxLeavesTheJvmsSigsegvHandlerInPlace() throws Exception {
        UcxPresent.assume();
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-cp", System.getProperty("java.class.path"),
                SigsegvHandlerProbe.class.getName()));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        Map<String, String> env = pb.environment();
        env.remove("UCX_ERROR_SIGNALS");
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "the probe did not end: " + out);
        assertEquals(0, p.exitValue(), out);
        Matcher m = Pattern.compile("present=(\\w+) before=(0x\\p{XDigit}+) after=(0x\\p{XDigit}+)").matcher(out);
        assertTrue(m.find(), out);
        assertEquals("true", m.group(1), out);
        assertTrue(!m.group(2).equals("0x0"), "the JVM installs a SIGSEGV handler: " + out);
        assertEquals(m.group(2), m.group(3), "UCX replaced the JVM's SIGSEGV handler: " + out);
    }
}
