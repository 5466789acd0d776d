package dev.rbridge.cli.kernel;

import dev.rbridge.cli.CliProcess;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Swap onto rbridge without deadlock: a 1 GiB guest serves a volume itself ({@code rbridge serve}, its memserver on
 * the host) and attaches it ({@code rbridge attach}), both with {@code --mlock-all --io-flusher on}, swaps onto it,
 * and a program touches 1.5 times the guest's RAM with every page verified on every pass (kmod-hooks/swap_hog.c).
 * Everything swapped out goes through the bridge in the same guest, whose own memory must then never be the thing
 * reclaimed. The program runs in a memory cgroup of 256 MiB, as a container would, so the reclaim is its own and the
 * machine keeps memory for the bridge's sockets (docs/operations.md, "Swapping onto rbridge"). The guest script
 * prints the timings, the locked memory and the threads in the flusher state.
 *
 * <p>{@code -Drbridge.test.swapProtections=off} runs the same without the protections (neither flag), to see what
 * they are for; the test then asks the same of the run, so it fails if the guest hangs or loses a page.
 */
@Timeout(2400)
@Tag("long") // about 20 minutes under TCG: ./test --long, not the full run (docs/testing.md)
class SwapGuestTest {
    private static final String TOKEN = "swap-guest-token-0123456789abcdef";
    private static final boolean PROTECTED =
            !"off".equals(System.getProperty("rbridge.test.swapProtections", "on"));

    @BeforeAll
    static void lab() {
        GuestLab.require("the swap guest test");
    }

    @Test
    void aGuestSwapsOntoADeviceItServesAndEveryPageComesBack() throws Exception {
        GuestLab lab = GuestLab.prepare("swap", "swap-guest.sh");
        Files.copy(KmodHooks.swapHog(), lab.share.resolve("swap_hog"), StandardCopyOption.REPLACE_EXISTING);
        String classpath = lab.copyClasspath();
        Path token = Files.writeString(Files.createTempFile("swap", ".token"), TOKEN + "\n");
        Path memserverLog = lab.run.resolve("memserver.log");
        Process memserver = CliProcess.start(memserverLog, "memserver", "--listen", "127.0.0.1:0", "--capacity",
                "3G", "--token-file", token.toString(), "--admin", "none", "--metrics", "none");
        try {
            String first = new BufferedReader(new InputStreamReader(memserver.getInputStream(),
                    StandardCharsets.UTF_8)).readLine();
            assertNotNull(first, Files.readString(memserverLog));
            Matcher port = Pattern.compile(":(\\d+)$").matcher(first.trim());
            assertTrue(port.find(), first);
            try (GuestLab.Guest guest = lab.start(2100, 1024, "MS_PORT=" + port.group(1), "TOKEN=" + TOKEN,
                    "RB_CP=" + classpath, "PROTECT=" + (PROTECTED ? 1 : 0))) {
                String output = guest.finish(2200);
                String logs = "\n---- serve.log\n" + lab.shared("serve.log") + "\n---- attach.log\n"
                        + lab.shared("attach.log");
                assertEquals(0, guest.exitValue(), "the guest script failed (run folder " + lab.run + ")\n"
                        + lab.tail(150) + logs);
                assertTrue(output.contains("swap_hog: OK:") && output.contains("all verified"), lab.tail(80));
                assertFalse(output.contains("MISMATCH"), lab.tail(80));
                Matcher out = Pattern.compile("after: pswpin (\\d+) pswpout (\\d+)").matcher(output);
                assertTrue(out.find(), output);
                // It really swapped: at least the guest's RAM in pages went out through the device.
                assertTrue(Long.parseLong(out.group(2)) > 1024L * 256, "pages swapped out: " + out.group(2));
                if (PROTECTED) {
                    assertTrue(lab.shared("serve.log").contains("all memory locked (mlockall)"), logs);
                    assertTrue(lab.shared("attach.log").contains("I/O flusher state set"), logs);
                }
            }
        } finally {
            memserver.destroy();
            memserver.waitFor();
        }
    }
}
