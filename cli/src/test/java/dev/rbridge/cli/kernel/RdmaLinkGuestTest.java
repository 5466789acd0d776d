package dev.rbridge.cli.kernel;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The RoCE link going away under I/O and coming back, in the qemu guest lab (soft-RoCE, {@code UCX_TLS=rc_verbs}):
 * with rxe0's netdev down, the bridge's requests fail with EIO (the queue pairs' errors reach it; nothing hangs), and
 * once the link is up again it reconnects, finds its regions holding every acknowledged write, and fio's checksummed
 * blocks verify again to the last one.
 *
 * <p>{@code rdma link delete rxe0} is not the fault used: on the 6.1 kernel rxe cannot disassociate its users, so the
 * delete waits until every process that opened the device has closed it, and I/O goes on verifying meanwhile.
 *
 * <p>Like the other guest tests it fails (does not skip) when the lab cannot run, unless
 * {@code RBRIDGE_SKIP_GUEST_TESTS=1} ({@link GuestLab}).
 */
@Timeout(900)
@Tag("guest")
class RdmaLinkGuestTest {
    private static final Pattern FIRST_FAILURE = Pattern.compile("link down: first failed verify (\\d+)s after");

    @BeforeAll
    static void lab() {
        GuestLab.require("the RDMA link guest test");
    }

    @Test
    void requestsFailWhileTheLinkIsDownAndTheDataVerifiesOnceItIsBack() throws Exception {
        GuestLab lab = GuestLab.prepare("rdma-link", "rdma-link-guest.sh");
        String classpath = lab.copyClasspath();
        try (GuestLab.Guest guest = lab.start(600, 3072, "RB_CP=" + classpath)) {
            String output = guest.finish(720);
            String logs = "\n---- ms.log\n" + lab.shared("ms.log") + "\n---- a.log\n" + lab.shared("a.log");
            assertEquals(0, guest.exitValue(), "the guest script failed (run folder " + lab.run + ")\n"
                    + lab.tail(150) + logs);
            assertTrue(output.contains("link outage survived"), lab.tail(80));
            assertTrue(output.contains("final verify: exit 0"), "the data verified\n" + lab.tail(80));
            Matcher m = FIRST_FAILURE.matcher(output);
            assertTrue(m.find(), "requests failed while the link was down\n" + lab.tail(80) + logs);
            // Failing, not hanging: the bridge's --timeout is 10 s; the script waits up to 120 s.
            assertTrue(Integer.parseInt(m.group(1)) <= 60, "first failure " + m.group(1) + " s after the link went "
                    + "down\n" + lab.tail(80));
            System.out.println("rdma link guest run: " + output.lines()
                    .filter(l -> l.startsWith("link ") || l.startsWith("final ")).toList());
        }
    }
}
