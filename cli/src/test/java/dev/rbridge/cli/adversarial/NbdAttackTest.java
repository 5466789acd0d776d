package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Hostile NBD clients against {@code rbridge serve} on real memserver processes, each beside a {@link
 * WellBehavedClient} that must be served within 2 s throughout, with no memserver declared down, no slab degraded,
 * the bridge's direct memory within its payload budget, and the bridge serving as before afterwards. Unless a test
 * says otherwise the attacker connects from 127.0.0.1, the well-behaved client's own address, so per-address limits
 * alone cannot be what saves it.
 */
@Timeout(300)
@Tag("fault")
class NbdAttackTest {
    private static final long MiB = 1 << 20;
    private static final Duration SERVED_WITHIN = Duration.ofSeconds(2);
    /** --nbd-memory's default, and what on top of it the bridge may hold: idle pooled buffers, per-connection and
     * memserver-link buffers. */
    private static final long PAYLOAD_BUDGET = 512 * MiB;
    private static final long DIRECT_MEMORY_LIMIT = PAYLOAD_BUDGET + 320 * MiB;

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    @BeforeAll
    static void peers() {
        PeerTool.require("qemu-io", "qemu-utils");
        PeerTool.check(30, "/usr/bin/python3", "-c", "import nbd");
    }

    private static ServeCluster cluster(String name, String... bridgeArgs) throws Exception {
        return LOGS.watch(ServeCluster.builder(name).memservers(2).metrics(true)
                .volume("disk,size=1G,replicas=2").bridgeArgs(bridgeArgs).start());
    }

    /** Data in [offset, offset+length), so reads there go to the memservers rather than being answered locally. */
    private static void fill(ServeCluster c, long offset, long length) {
        PeerTool.check(120, "qemu-io", "-f", "raw", c.uri("disk"), "-c",
                "write -P 0x5a " + offset + " " + length);
    }

    private static WellBehavedClient wellBehaved(ServeCluster c) throws Exception {
        WellBehavedClient good = WellBehavedClient.start(c.uri("disk"), 0);
        good.awaitCycles(20, Duration.ofSeconds(30));
        good.resetLongestGap();
        return good;
    }

    /**
     * For {@code duration}: the well-behaved client keeps being served and the bridge's direct memory stays within
     * its budget. Returns the most direct memory seen.
     */
    private static long hold(ServeCluster c, WellBehavedClient good, Duration duration) throws Exception {
        long most = 0;
        long until = System.nanoTime() + duration.toNanos();
        while (System.nanoTime() < until) {
            good.assertServedWithin(SERVED_WITHIN);
            long direct = Scrape.directMemory(c.metricsAddress());
            most = Math.max(most, direct);
            assertTrue(direct <= DIRECT_MEMORY_LIMIT, "the bridge holds " + direct / MiB
                    + " MiB of direct memory, more than its payload budget allows (" + DIRECT_MEMORY_LIMIT / MiB
                    + " MiB)");
            Thread.sleep(250);
        }
        return most;
    }

    /** After the attack: the client is still served, the cluster intact. */
    private static void servesAsBefore(ServeCluster c, WellBehavedClient good) throws Exception {
        good.awaitCycles(20, Duration.ofSeconds(10));
        good.assertServedWithin(SERVED_WITHIN);
        ClusterIntegrity.assertIntact(c);
    }

    private static double closedFor(ServeCluster c, String reason) throws Exception {
        return Scrape.sum(Scrape.metrics(c.metricsAddress()), "rbridge_nbd_connections_closed_total",
                "reason=\"" + reason + "\"");
    }

    private static void awaitClosedFor(ServeCluster c, String reason, int atLeast, Duration timeout)
            throws Exception {
        long deadline = System.nanoTime() + timeout.toNanos();
        double n = 0;
        while (System.nanoTime() < deadline && (n = closedFor(c, reason)) < atLeast) {
            Thread.sleep(100);
        }
        assertTrue(n >= atLeast, "connections closed for " + reason + ": " + n + ", expected at least " + atLeast);
    }

    /**
     * 64 pipelined 1 MiB READs whose replies are never read: the replies fill the socket, and on the old code the
     * memserver link's reader thread, which completed the reads, blocked writing them, so the bridge declared both
     * healthy memservers dead. Now only that connection waits, and it is closed after --reply-timeout.
     */
    @Test
    void aClientThatNeverReadsItsRepliesStallsOnlyItself() throws Exception {
        try (ServeCluster c = cluster("never-reads", "--reply-timeout", "8")) {
            fill(c, 256 * MiB, 64 * MiB);
            try (WellBehavedClient good = wellBehaved(c);
                    HostileNbdClient bad = HostileNbdClient.inTransmission("127.0.0.1", c.nbdPort(), null, "disk")) {
                bad.readBurst(64, 256 * MiB, (int) MiB);
                hold(c, good, Duration.ofSeconds(6));
                ClusterIntegrity.assertIntact(c);
                awaitClosedFor(c, "reply_timeout", 1, Duration.ofSeconds(15));
                servesAsBefore(c, good);
            }
        }
    }

    /**
     * 80 READs of 32 MiB in one send on one connection that reads no reply: 2.5 GiB of buffers, more than the bridge's
     * 2 GiB of direct memory; on the old code allocating them failed with OutOfMemoryError on other connections'
     * threads. Now the connection gets its share of the payload budget and the rest of its requests wait.
     */
    @Test
    void hugeReadsWaitForPayloadMemoryInsteadOfExhaustingIt() throws Exception {
        try (ServeCluster c = cluster("huge-reads")) {
            fill(c, 512 * MiB, 32 * MiB);
            try (WellBehavedClient good = wellBehaved(c);
                    HostileNbdClient bad = HostileNbdClient.inTransmission("127.0.0.1", c.nbdPort(), null, "disk")) {
                bad.readBurst(80, 512 * MiB, (int) (32 * MiB), 0);
                long most = hold(c, good, Duration.ofSeconds(10));
                assertTrue(most > 64 * MiB, "the attack never took memory (" + most / MiB + " MiB): it tested nothing");
                ClusterIntegrity.assertIntact(c);
            }
            try (WellBehavedClient good = wellBehaved(c)) {
                servesAsBefore(c, good);
            }
        }
    }

    /**
     * 64 connections that each declare a 32 MiB WRITE and never send it: on the old code each got its 32 MiB buffer
     * at once (2 GiB) and nothing ever timed them out. Now a payload waits for its share of memory, connections that
     * hold memory while stalled are closed when others need it, and the rest when --request-timeout passes.
     */
    @Test
    void declaredWritesThatNeverArriveCannotStarveOthers() throws Exception {
        try (ServeCluster c = cluster("declared-writes", "--request-timeout", "6")) {
            List<HostileNbdClient> bad = new ArrayList<>();
            try (WellBehavedClient good = wellBehaved(c)) {
                for (int i = 0; i < 64; i++) {
                    HostileNbdClient h = HostileNbdClient.inTransmission("127.0.0.1", c.nbdPort(), null, "disk");
                    bad.add(h);
                    h.partialWrite(512 * MiB, (int) (32 * MiB), 4096);
                }
                hold(c, good, Duration.ofSeconds(10));
                ClusterIntegrity.assertIntact(c);
                for (HostileNbdClient h : bad) {
                    assertTrue(h.closedByServer(10_000), "a connection stalled mid-WRITE was never closed");
                }
                servesAsBefore(c, good);
            } finally {
                bad.forEach(HostileNbdClient::close);
            }
        }
    }

    /**
     * 1280 idle connections (after the handshake) from five other addresses: on the old code the first 1024 took
     * every slot for good, and every new client was refused. Now a new connection takes the slot of the longest-idle
     * connection of the address holding the most.
     */
    @Test
    void idleConnectionsCannotLockOutNewClients() throws Exception {
        try (ServeCluster c = cluster("idle-slots")) {
            List<HostileNbdClient> bad = new ArrayList<>();
            try (WellBehavedClient good = wellBehaved(c)) {
                for (int i = 0; i < 1280; i++) {
                    try {
                        bad.add(HostileNbdClient.inTransmission("127.0.0.1", c.nbdPort(), "127.0.0." + (2 + i % 5),
                                "disk"));
                    } catch (IOException e) {
                        // refused or evicted while negotiating: the attack still holds what it could
                    }
                }
                // (on the old code it got 1023 in, then the well-behaved client's next connection was refused)
                assertTrue(bad.size() >= 1000, "the attack got only " + bad.size() + " connections in");
                hold(c, good, Duration.ofSeconds(5));
                ClusterIntegrity.assertIntact(c);
                servesAsBefore(c, good);
            } finally {
                bad.forEach(HostileNbdClient::close);
            }
        }
    }

    /**
     * 1100 connections that never say a word: on the old code they held every slot until their handshake timed out
     * (30 s), so new clients were refused. Now connections still handshaking are the first to give up their slots.
     */
    @Test
    void silentConnectionsCannotLockOutNewClients() throws Exception {
        try (ServeCluster c = cluster("silent-slots")) {
            List<HostileNbdClient> bad = new ArrayList<>();
            try (WellBehavedClient good = wellBehaved(c)) {
                for (int i = 0; i < 1100; i++) {
                    bad.add(HostileNbdClient.connect("127.0.0.1", c.nbdPort(), null));
                }
                hold(c, good, Duration.ofSeconds(5));
                ClusterIntegrity.assertIntact(c);
                servesAsBefore(c, good);
            } finally {
                bad.forEach(HostileNbdClient::close);
            }
        }
    }

    /**
     * Half a request header, and a WRITE with half its payload, then silence: on the old code both connections were
     * held forever. Now --request-timeout closes them.
     */
    @Test
    void halfSentRequestsAreTimedOut() throws Exception {
        try (ServeCluster c = cluster("half-sent", "--request-timeout", "3")) {
            try (WellBehavedClient good = wellBehaved(c);
                    HostileNbdClient header = HostileNbdClient.inTransmission("127.0.0.1", c.nbdPort(), null, "disk");
                    HostileNbdClient payload =
                            HostileNbdClient.inTransmission("127.0.0.1", c.nbdPort(), null, "disk")) {
                header.send(new byte[14]);
                payload.partialWrite(0, (int) MiB, (int) (MiB / 2));
                assertTrue(header.closedByServer(10_000), "a half-sent header was never timed out");
                assertTrue(payload.closedByServer(10_000), "a half-sent WRITE payload was never timed out");
                awaitClosedFor(c, "request_timeout", 2, Duration.ofSeconds(5));
                servesAsBefore(c, good);
            }
        }
    }
}
