package dev.rbridge.cli.partition;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The partition harness itself, with {@link NetProbe}s in two nodes: a TCP connection and UDP both ways work; a cut
 * lets nothing through either way while both processes keep running, and its heal lets the same TCP connection
 * deliver what waited; loss drops all or some; close leaves no namespace.
 */
@Timeout(180)
@Tag("fault")
class PartitionLabTest {
    private static final int PORT = 7000;
    private static final int DATAGRAMS = 200;

    @BeforeAll
    static void available() {
        PartitionLab.assumeAvailable();
    }

    private static int replies(NetProbe.Remote from, PartitionLab lab, String to) throws IOException {
        String r = from.ask("udp " + lab.address(to) + " " + PORT + " " + DATAGRAMS + " 1000");
        Matcher m = Pattern.compile("replies (\\d+)").matcher(r);
        assertTrue(m.matches(), r);
        return Integer.parseInt(m.group(1));
    }

    @Test
    void aCutDropsEverythingBothWaysWhileBothSidesRunAndItsHealDeliversWhatWaited() throws Exception {
        String prefix;
        try (PartitionLab lab = PartitionLab.create("a", "b", "c")) {
            prefix = lab.prefix();
            assertTrue(PartitionLab.listNamespaces().contains(lab.node("a")), PartitionLab.listNamespaces().toString());
            NetProbe.Remote a = NetProbe.Remote.start(lab, "a", PORT);
            NetProbe.Remote b = NetProbe.Remote.start(lab, "b", PORT);
            NetProbe.Remote c = NetProbe.Remote.start(lab, "c", PORT);

            assertEquals("connected", b.ask("connect " + lab.address("a") + " " + PORT + " 5000"));
            assertEquals("echo hello", b.ask("send hello 5000"));
            assertEquals(DATAGRAMS, replies(a, lab, "b"));
            assertEquals(DATAGRAMS, replies(b, lab, "a"));

            lab.cut("a", "b");
            assertEquals(100, lab.dropPercent("b", "a"));
            // The established connection: what b sends gets no echo (TCP keeps retransmitting, nothing arrives).
            assertEquals("timeout", b.ask("send during-the-cut 2000"));
            assertEquals(0, replies(a, lab, "b"), "a datagram crossed the cut from a to b");
            assertEquals(0, replies(b, lab, "a"), "a datagram crossed the cut from b to a");
            // A new connection from a times out: dropped, not rejected (a reset would say "refused").
            assertEquals("timeout", a.ask("connect " + lab.address("b") + " " + PORT + " 2000"));
            assertTrue(a.isAlive() && b.isAlive(), "a partition is not a kill: both sides run");
            // Only the pair is cut: both still reach c, and c both of them.
            assertEquals(DATAGRAMS, replies(c, lab, "a"));
            assertEquals(DATAGRAMS, replies(b, lab, "c"));
            assertTrue(lab.rules().contains("ip saddr " + lab.address("b")), lab.rules());

            lab.heal("a", "b");
            // The same connection survived the cut: TCP's retransmission delivers the line sent during it.
            assertEquals("echo during-the-cut", b.ask("await 30000"), "after heal, the waiting line arrives");
            assertEquals("echo after", b.ask("send after 5000"));
            assertEquals(DATAGRAMS, replies(a, lab, "b"));
            assertEquals("connected", a.ask("connect " + lab.address("b") + " " + PORT + " 5000"));

            lab.isolate("c");
            assertEquals(0, replies(a, lab, "c"));
            assertEquals(0, replies(c, lab, "b"));
            assertEquals(DATAGRAMS, replies(a, lab, "b"), "isolating c leaves a-b alone");
            lab.healAll();
            assertEquals(DATAGRAMS, replies(c, lab, "a"));
            assertTrue(a.isAlive() && b.isAlive() && c.isAlive());
        }
        for (String ns : PartitionLab.listNamespaces()) {
            assertFalse(ns.startsWith(prefix), "close() left namespace " + ns + " behind");
        }
    }

    @Test
    void lossDropsAllAtOneHundredAndSomeButNotAllAtThirty() throws Exception {
        try (PartitionLab lab = PartitionLab.create("a", "b")) {
            NetProbe.Remote a = NetProbe.Remote.start(lab, "a", PORT);
            NetProbe.Remote.start(lab, "b", PORT);
            lab.loss("a", "b", 100);
            assertEquals(0, replies(a, lab, "b"));
            lab.loss("a", "b", 30);
            // Each way drops 30 %, so a round trip survives with 0.49: about 98 of 200 (sd 7); bounds 40 sd wide.
            int got = replies(a, lab, "b");
            assertTrue(got > 40 && got < 160, "30 % loss each way let " + got + " of " + DATAGRAMS + " round trips"
                    + " through\n" + lab.rules());
            lab.heal("a", "b");
            assertEquals(DATAGRAMS, replies(a, lab, "b"));
        }
    }

    @Test
    void aDelayHoldsEachWayOfTheConnectionsOpenedSinceAndUndelayReleasesThem() throws Exception {
        try (PartitionLab lab = PartitionLab.create("a", "b")) {
            NetProbe.Remote.start(lab, "a", PORT);
            NetProbe.Remote b = NetProbe.Remote.start(lab, "b", PORT);
            NetProbe.Remote before = NetProbe.Remote.start(lab, "b", PORT + 1);
            assertEquals("connected", before.ask("connect " + lab.address("a") + " " + PORT + " 5000"));
            lab.delay("b", "a", PORT, 1000);
            assertEquals("connected", b.ask("connect " + lab.address("a") + " " + PORT + " 5000"));
            assertTrue(roundTrip(b, "slow") >= 2000, "a 1000 ms delay each way must add 2000 ms to a round trip");
            assertTrue(roundTrip(before, "direct") < 2000, "a connection opened before the delay stays direct");

            lab.undelay("b", "a", PORT);
            assertTrue(roundTrip(b, "released") < 2000, "after undelay the relayed connection is no longer held");
            assertEquals("connected", b.ask("connect " + lab.address("a") + " " + PORT + " 5000"));
            assertTrue(roundTrip(b, "fast") < 2000);
            lab.delay("b", "a", PORT, 1000);
            assertTrue(roundTrip(b, "slow-again") >= 2000, "a delay set again holds the relay's connections");
        }
    }

    /** The milliseconds from sending a line on the probe's connection to its echo. */
    private static long roundTrip(NetProbe.Remote probe, String text) throws IOException {
        long t0 = System.nanoTime();
        assertEquals("echo " + text, probe.ask("send " + text + " 10000"));
        return (System.nanoTime() - t0) / 1_000_000;
    }

    @Test
    void theNamespacesOfAnAbortedRunAreRemovedWhenTheNextLabStarts() throws Exception {
        Process gone = new ProcessBuilder("true").start();
        assertEquals(0, gone.waitFor());
        String leftover = "rbpart-" + gone.pid() + "-1-m0"; // as a run whose JVM was killed before close() leaves it
        assertEquals(0, new ProcessBuilder("ip", "netns", "add", leftover).inheritIO().start().waitFor());
        assertTrue(PartitionLab.listNamespaces().contains(leftover));
        try (PartitionLab lab = PartitionLab.create("a")) {
            assertFalse(PartitionLab.listNamespaces().contains(leftover), "the aborted run's namespace is still there");
            assertTrue(PartitionLab.listNamespaces().contains(lab.node("a")));
        } finally {
            new ProcessBuilder("ip", "netns", "del", leftover).start().waitFor(); // only if the assertion failed
        }
    }

    @Test
    void aLabRefusesUnknownNodesAndSelfCuts() throws Exception {
        try (PartitionLab lab = PartitionLab.create("a", "b")) {
            assertThrows(IllegalArgumentException.class, () -> lab.cut("a", "a"));
            assertThrows(IllegalArgumentException.class, () -> lab.cut("a", "nope"));
            assertThrows(IllegalArgumentException.class, () -> lab.loss("a", "b", 101));
            assertEquals("10.251.0.1", lab.address("a"));
            assertEquals("10.251.0.2", lab.address("b"));
        }
    }
}
