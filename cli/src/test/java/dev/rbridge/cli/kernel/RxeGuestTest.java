package dev.rbridge.cli.kernel;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Real RDMA verbs, not emulation: in a qemu guest (kmod-hooks/lab) soft-RoCE ({@code rdma_rxe} on eth0) is the RDMA
 * device, and two memservers and a bridge run on {@code --transport ucx} restricted to verbs lanes
 * ({@code UCX_TLS=rc_verbs,ud_verbs}). {@code rbridge ping} validates, {@code rbridge bench} reports an
 * {@code rc_verbs/rxe0} lane and nothing else, the memserver's UCX progress thread uses no CPU while a client writes
 * one-sided for seconds, and the kernel's nbd-client on /dev/nbd0 against that bridge passes write_data and an fio
 * {@code verify=crc32c} run.
 *
 * <p>Like the other guest tests it fails (does not skip) when the lab cannot run, unless
 * {@code RBRIDGE_SKIP_GUEST_TESTS=1} ({@link GuestLab}).
 */
@Timeout(900)
@Tag("guest")
class RxeGuestTest {
    private static final Pattern PASSIVE = Pattern.compile("passive: memserver progress thread (-?\\d+) ticks, whole"
            + " memserver (\\d+) ticks");
    private static final Pattern NUMA_PAGES = Pattern.compile("numa: ms1 regions prefer node 1, pages on node 1: "
            + "(\\d+), elsewhere: (\\d+)");

    @BeforeAll
    static void lab() {
        GuestLab.require("the soft-RoCE guest test");
    }

    @Test
    void ucxOverSoftRoceUsesVerbsLanesLeavesTheMemserverPassiveAndCarriesKernelNbd() throws Exception {
        GuestLab lab = GuestLab.prepare("rxe", "rxe-guest.sh").numa().smp(2);
        String classpath = lab.copyClasspath();
        try (GuestLab.Guest guest = lab.start(600, 3072, "RB_CP=" + classpath)) {
            String output = guest.finish(720);
            assertEquals(0, guest.exitValue(), "the guest script failed (run folder " + lab.run + ")\n"
                    + lab.tail(150) + "\n---- ms1.log\n" + lab.shared("ms1.log") + "\n---- serve.log\n"
                    + lab.shared("serve.log"));
            assertTrue(output.contains("all verified"), lab.tail(80));
            assertTrue(output.contains("all validated"), "ping validated over rxe\n" + lab.tail(80));
            String lanes = output.lines().filter(l -> l.contains("UCX lanes")).findFirst().orElse("");
            assertTrue(lanes.contains("rc_verbs/rxe0"), "an RDMA lane: " + lanes);
            assertFalse(lanes.matches(".*(tcp/|posix|sysv|cma).*"), "no emulated lane: " + lanes);
            Matcher p = PASSIVE.matcher(output);
            assertTrue(p.find(), "the passivity measurement\n" + lab.tail(80));
            long progress = Long.parseLong(p.group(1));
            // One-sided: the memserver's progress thread is not woken by GET/PUT. Answering them (emulated RMA: one
            // active message per 64 KiB write, about 2000 in the 8 s run) would cost it hundreds of ticks under TCG;
            // the connect, the region mapping and its timers cost it 2 to 12 in the runs so far. 40 (400 ms) leaves
            // room for a loaded machine and still tells the two apart.
            assertTrue(progress <= 40, "memserver progress thread used " + progress + " ticks during one-sided writes");
            assertEquals(1, output.lines().filter(l -> l.startsWith("write_data: OK:")).count(),
                    "write_data verified through kernel nbd over the ucx bridge\n" + lab.tail(80));
            assertTrue(output.contains("fio: errors 0, written KiB 32768"), "fio verify through the bridge\n"
                    + lab.tail(60));
            String numa = output.lines().filter(l -> l.startsWith("numa: ")).findFirst().orElse("");
            assertTrue(lab.shared("ms1.log").contains("NUMA placement: region memory from node 1 (auto: the node of "
                    + "eth0"), "memserver 1 placed regions next to the NIC\n" + lab.shared("ms1.log"));
            Matcher pages = NUMA_PAGES.matcher(numa);
            assertTrue(pages.matches(), "memserver 1's regions prefer node 1: " + numa + "\n" + lab.tail(60));
            long onNic = Long.parseLong(pages.group(1));
            long elsewhere = Long.parseLong(pages.group(2));
            // Preferred, not bound: a node short of free pages lends from the other. Unplaced, the pages would
            // follow the CPU that touched them, about half on each node.
            assertTrue(onNic > 0 && elsewhere * 10 <= onNic, "region pages on the NIC's node: " + numa);
            System.out.println("rxe guest run: " + lanes.strip() + "; " + p.group());
        }
    }
}
