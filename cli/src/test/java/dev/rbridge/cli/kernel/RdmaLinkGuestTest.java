package dev.rbridge.cli.kernel;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.DatagramSocket;
import java.net.InetAddress;
import java.security.SecureRandom;
import java.util.HexFormat;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * RoCE between two qemu guests of the lab (soft-RoCE, {@code UCX_TLS=rc_verbs}), the memserver in one and the bridge in
 * the other, cabled by a wire of their own: with 1 % of the packets lost, RC retransmits and fio's checksummed writes
 * verify; with rxe0's netdev down, the bridge's requests fail with EIO (the queue pairs' errors reach it; nothing
 * hangs), and once the link is up again it reconnects, finds its regions holding every acknowledged write, and the
 * blocks verify again to the last one. Loss needs two guests: within one, rxe delivers to its own address without
 * the netdev, where netem would act.
 *
 * <p>{@code rdma link delete rxe0} is not the fault used: on the 6.1 kernel rxe cannot disassociate its users, so the
 * delete waits until every process that opened the device has closed it, and I/O goes on verifying meanwhile.
 *
 * <p>Like the other guest tests it fails (does not skip) when the lab cannot run, unless
 * {@code RBRIDGE_SKIP_GUEST_TESTS=1} ({@link GuestLab}).
 */
@Timeout(1200)
@Tag("guest")
class RdmaLinkGuestTest {
    private static final Pattern FIRST_FAILURE = Pattern.compile("link down: first failed verify (\\d+)s after");
    private static final Pattern LOSSY = Pattern.compile("lossy: fio errors (\\d+), written KiB (\\d+), netem dropped "
            + "(\\d+), rxe retransmission signs (-?\\d+)");

    /** Two UDP ports free on the host's loopback right now, for the two ends of the wire. */
    private static int[] freeUdpPorts() throws IOException {
        try (DatagramSocket a = new DatagramSocket(0, InetAddress.getLoopbackAddress());
                DatagramSocket b = new DatagramSocket(0, InetAddress.getLoopbackAddress())) {
            return new int[]{a.getLocalPort(), b.getLocalPort()};
        }
    }

    @BeforeAll
    static void lab() {
        GuestLab.require("the RDMA link guest test");
    }

    @Test
    void lostPacketsAreResentAndALinkOutageFailsRequestsButLosesNothing() throws Exception {
        int[] ports = freeUdpPorts();
        String token = HexFormat.of().formatHex(new SecureRandom().generateSeed(16));
        GuestLab far = GuestLab.prepare("rdma-link-far", "rdma-link-far.sh").wire(ports[0], ports[1], 1).smp(1);
        GuestLab lab = GuestLab.prepare("rdma-link", "rdma-link-guest.sh").wire(ports[1], ports[0], 2);
        String farClasspath = far.copyClasspath();
        String classpath = lab.copyClasspath();
        try (GuestLab.Guest farGuest = far.start(900, 1536, "RB_CP=" + farClasspath, "TOKEN=" + token);
                GuestLab.Guest guest = lab.start(840, 2048, "RB_CP=" + classpath, "TOKEN=" + token)) {
            String output = guest.finish(900);
            String logs = "\n---- far guest\n" + far.tail(40) + "\n---- ms.log\n" + far.shared("ms.log")
                    + "\n---- a.log\n" + lab.shared("a.log");
            assertEquals(0, guest.exitValue(), "the guest script failed (run folder " + lab.run + ")\n"
                    + lab.tail(150) + logs);
            assertTrue(output.contains("link outage survived"), lab.tail(80));
            assertTrue(output.contains("final verify: exit 0"), "the data verified\n" + lab.tail(80));
            Matcher lossy = LOSSY.matcher(output);
            assertTrue(lossy.find(), "the lossy phase ran\n" + lab.tail(80) + logs);
            assertEquals("0", lossy.group(1), "fio found no error with packets lost: " + lossy.group());
            assertEquals("4096", lossy.group(2), "every block written: " + lossy.group());
            assertTrue(Long.parseLong(lossy.group(3)) > 0, "netem dropped packets: " + lossy.group());
            assertTrue(Long.parseLong(lossy.group(4)) > 0, "RC went back for them: " + lossy.group());
            Matcher m = FIRST_FAILURE.matcher(output);
            assertTrue(m.find(), "requests failed while the link was down\n" + lab.tail(80) + logs);
            // Failing, not hanging: the bridge's --timeout is 10 s; the script waits up to 120 s.
            assertTrue(Integer.parseInt(m.group(1)) <= 60, "first failure " + m.group(1) + " s after the link went "
                    + "down\n" + lab.tail(80));
            System.out.println("rdma link guest run: " + output.lines()
                    .filter(l -> l.startsWith("link ") || l.startsWith("final ") || l.startsWith("lossy: ")).toList());
        }
    }
}
