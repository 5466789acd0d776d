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
 * Fencing that the RDMA NIC enforces (soft-RoCE in the qemu guest lab, {@code UCX_TLS=rc_verbs,ud_verbs}): bridge
 * A's control connection to the memserver is cut by a firewall rule while RoCE keeps flowing, its lease lapses, and
 * bridge B takes the volume over. The memserver deregisters the volume's memory on the takeover, so the NIC refuses
 * A's old rkeys: A's writes fail, B's checksummed data verifies after A went on trying for seconds, and the regions
 * the NIC knows for the volume have new rkeys ({@code rdma res show mr}). With UCX's default registration cache
 * ({@code rcache}) a deregistered region and its rkey stay alive, and A's writes land in B's data.
 *
 * <p>Like the other guest tests it fails (does not skip) when the lab cannot run, unless
 * {@code RBRIDGE_SKIP_GUEST_TESTS=1} ({@link GuestLab}).
 */
@Timeout(900)
@Tag("guest")
class SplitBrainGuestTest {
    private static final Pattern A_WRITES = Pattern.compile("A writes: errors (\\d+)");
    private static final Pattern A_UCX = Pattern.compile("A log: (\\d+) UCX failure");
    private static final Pattern A_CLOSED = Pattern.compile("memserver: (\\d+) fenced endpoint\\(s\\) of A closed");

    @BeforeAll
    static void lab() {
        GuestLab.require("the split-brain guest test");
    }

    @Test
    void aBridgeCutOffOnItsControlConnectionCannotWriteOverTheNewOwnersData() throws Exception {
        GuestLab lab = GuestLab.prepare("split-brain", "split-brain-guest.sh");
        String classpath = lab.copyClasspath();
        try (GuestLab.Guest guest = lab.start(600, 3072, "RB_CP=" + classpath)) {
            String output = guest.finish(720);
            String logs = "\n---- ms.log\n" + lab.shared("ms.log") + "\n---- a.log (end)\n"
                    + tailOf(lab.shared("a.log"), 40) + "\n---- b.log\n" + lab.shared("b.log");
            assertEquals(0, guest.exitValue(), "the guest script failed (run folder " + lab.run + ")\n"
                    + lab.tail(150) + logs);
            assertTrue(output.contains("split brain fenced"), lab.tail(80));
            assertTrue(output.contains("B verify: exit 0"), "B's data verified\n" + lab.tail(80));
            assertTrue(output.contains("rkeys: all new after the takeover"), "new rkeys\n" + lab.tail(80));
            Matcher a = A_WRITES.matcher(output);
            assertTrue(a.find(), "A's fio summary\n" + lab.tail(80));
            assertTrue(Long.parseLong(a.group(1)) > 0, "A's writes failed after the takeover\n" + lab.tail(80)
                    + logs);
            // Two things shut A out at the NIC, and which one A meets first is a race: a PUT with a withdrawn rkey gets
            // a remote access error, which breaks A's queue pair and UCX reports; and the memserver closes A's
            // endpoint once the takeover is granted, after which A's PUTs reach no queue pair at all. Either must be
            // seen; "rkeys all new" and B's verify above hold in both cases.
            Matcher u = A_UCX.matcher(output);
            Matcher c = A_CLOSED.matcher(output);
            assertTrue(u.find() && c.find(), "the script reports both ways A is shut out\n" + lab.tail(80));
            assertTrue(Integer.parseInt(u.group(1)) > 0 || Integer.parseInt(c.group(1)) > 0,
                    "A's endpoint failed in UCX, or the memserver closed it\n" + lab.tail(80) + logs);
            System.out.println("split-brain guest run: " + output.lines()
                    .filter(l -> l.startsWith("rkeys") || l.startsWith("A ") || l.startsWith("B ")
                            || l.startsWith("memserver:"))
                    .toList());
        }
    }

    private static String tailOf(String text, int lines) {
        String[] all = text.split("\n");
        return String.join("\n", java.util.Arrays.copyOfRange(all, Math.max(0, all.length - lines), all.length));
    }
}
