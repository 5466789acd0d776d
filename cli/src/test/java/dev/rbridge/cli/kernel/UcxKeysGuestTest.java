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
 * Whether a ucx memserver's withdrawn remote keys are enforced by the NIC, as UCX itself reports it (its context's
 * memory domains, the IB registration methods it reads, each client endpoint's lanes), on soft-RoCE in the qemu guest
 * lab. With the lab's settings ({@code UCX_TLS=rc_verbs,ud_verbs}) the memserver says the keys are NIC-enforced, a
 * takeover of a frozen bridge's volume closes that bridge's endpoint and gives the regions new rkeys, and no grace
 * period is kept; with {@code UCX_IB_REG_METHODS=rcache} it says they are not and keeps a killed bridge's regions
 * registered for the grace period; with {@code UCX_TLS=sm,self} it says they are not.
 *
 * <p>Like the other guest tests it fails (does not skip) when the lab cannot run, unless
 * {@code RBRIDGE_SKIP_GUEST_TESTS=1} ({@link GuestLab}).
 */
@Timeout(900)
@Tag("guest")
class UcxKeysGuestTest {
    private static final Pattern KEYS = Pattern.compile(
            "(ms\\d) keys: (\\d+) enforced, (\\d+) not enforced, (\\d+) grace, (\\d+) fenced endpoint\\(s\\)");

    @BeforeAll
    static void lab() {
        GuestLab.require("the ucx key enforcement guest test");
    }

    @Test
    void theMemserverReportsKeysNicEnforcedOnlyWhereUcxEnforcesThem() throws Exception {
        GuestLab lab = GuestLab.prepare("ucx-keys", "ucx-keys-guest.sh");
        String classpath = lab.copyClasspath();
        try (GuestLab.Guest guest = lab.start(600, 3072, "RB_CP=" + classpath)) {
            String output = guest.finish(720);
            String logs = "\n---- ms1.log\n" + lab.shared("ms1.log") + "\n---- ms2.log\n" + lab.shared("ms2.log")
                    + "\n---- ms3.log\n" + lab.shared("ms3.log");
            assertEquals(0, guest.exitValue(), "the guest script failed (run folder " + lab.run + ")\n"
                    + lab.tail(150) + logs);
            assertTrue(output.contains("keys checked"), lab.tail(80));
            assertTrue(output.contains("rkeys: all new after the takeover"), "new rkeys\n" + lab.tail(80));
            long[] ms1 = keys(output, "ms1", logs);
            assertEquals(1, ms1[0], "ms1 reports its keys NIC-enforced" + logs);
            assertEquals(0, ms1[1], "ms1 reports nothing unenforced" + logs);
            assertEquals(0, ms1[2], "ms1 keeps no grace period" + logs);
            assertTrue(ms1[3] >= 1, "ms1 closed the frozen bridge's endpoint on the takeover" + logs);
            long[] ms2 = keys(output, "ms2", logs);
            assertEquals(0, ms2[0], "rcache: not enforced" + logs);
            assertEquals(1, ms2[1], "rcache: said once" + logs);
            assertTrue(ms2[2] >= 1, "rcache: the killed bridge's regions stay for the grace period" + logs);
            assertTrue(lab.shared("ms2.log").contains("UCX_IB_REG_METHODS=rcache"), "why, in ms2's log" + logs);
            long[] ms3 = keys(output, "ms3", logs);
            assertEquals(0, ms3[0], "sm,self: not enforced" + logs);
            assertEquals(1, ms3[1], "sm,self: said once" + logs);
            System.out.println("ucx keys guest run: " + output.lines().filter(l -> l.contains(" keys: ")
                    || l.startsWith("rkeys")).toList());
        }
    }

    /** The counts the guest printed for memserver {@code name}: enforced, not enforced, grace, fenced endpoints. */
    private static long[] keys(String output, String name, String logs) {
        Matcher m = KEYS.matcher(output);
        while (m.find()) {
            if (m.group(1).equals(name)) {
                return new long[]{Long.parseLong(m.group(2)), Long.parseLong(m.group(3)),
                        Long.parseLong(m.group(4)), Long.parseLong(m.group(5))};
            }
        }
        throw new AssertionError("no key report of " + name + " in the guest's output" + logs);
    }
}
