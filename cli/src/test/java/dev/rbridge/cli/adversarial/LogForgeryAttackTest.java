package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Names a peer sends that the servers log: a memserver client's name in its HELLO (logged before the token is
 * checked) and the export an NBD client asks for with EXPORT_NAME. Each name carries a newline and a line of its own,
 * the way a forged log line would, and other control characters. Neither log may show the forged line as a line, and
 * a few hundred connections make a few lines, not one each (300 unknown exports were 300 INFO lines, 0.9 MB).
 */
@Timeout(300)
class LogForgeryAttackTest extends MemserverAttackTest {
    static final int CONNECTIONS = 300;
    static final int STATUS_AUTH_FAILED = 2;
    /** What starts each forged line; a line of the log that starts so was forged. */
    static final String FORGED = "FORGED-LINE";
    /** A name that ends the log line and writes one of its own, with an escape sequence and a Unicode line separator. */
    static final String NAME = "x\n" + FORGED + " INFO dev.rbridge.memserver.Memserver - client 'admin' granted\r\n"
            + FORGED + " \u001b[2J\u2028" + "y".repeat(3000);
    /** Lines the attack may add to a log: a line every 5 s per reason, for a test that takes well under a minute. */
    static final int LINES_BOUND = 30;

    @Test
    void namesWithNewlinesForgeNoLineAndManyConnectionsMakeFewLines() throws Exception {
        try (ServeCluster c = start(ServeCluster.builder("log-forgery")
                .memservers(1).capacity("128M").token(TOKEN).volume(VOLUME + ",size=64M,slab=16M"))) {
            ServeCluster.Memserver m = c.memserver(0);
            long memserverBefore = m.process().log().lines().count();
            for (int i = 0; i < CONNECTIONS; i++) {
                try (Raw r = Raw.connect(address(m), loopback(2 + i % 40))) {
                    // The token in clear (a HELLO), and a wrong one: logged before and after the token check.
                    assertEquals(STATUS_AUTH_FAILED, r.hello("wrong-" + TOKEN, NAME + i).status());
                }
            }
            long bridgeBefore = c.bridge().log().lines().count();
            for (int i = 0; i < CONNECTIONS; i++) {
                try (HostileNbdClient h = HostileNbdClient.connect("127.0.0.1", c.nbdPort(), loopback(2 + i % 40))) {
                    h.readGreeting();
                    h.exportName(NAME + i);
                    assertTrue(h.closedByServer(5_000), "the bridge did not close connection " + i
                            + " that asked for an unknown export");
                }
            }
            assertNoForgedLine("memserver", m.process().log(), memserverBefore);
            assertNoForgedLine("bridge", c.bridge().log(), bridgeBefore);
        }
    }

    @Test
    void aDrainingMemserverLogsTheNamesItRefusesPrintableAndRarely() throws Exception {
        try (ServeCluster c = start(ServeCluster.builder("log-forgery-drain").memservers(1).capacity("128M")
                .token(TOKEN).memserverAdmin(true).volume(VOLUME + ",size=64M,slab=16M"))) {
            ServeCluster.Memserver m = c.memserver(0);
            java.net.http.HttpResponse<String> drain = java.net.http.HttpClient.newHttpClient().send(
                    java.net.http.HttpRequest.newBuilder(java.net.URI.create("http://" + m.adminAddress()
                            + "/drain")).header("Authorization", "Bearer " + TOKEN)
                            .POST(java.net.http.HttpRequest.BodyPublishers.noBody()).build(),
                    java.net.http.HttpResponse.BodyHandlers.ofString());
            assertEquals(202, drain.statusCode(), drain.body()); // accepted: the bridge stays connected, so it drains on
            long before = m.process().log().lines().count();
            for (int i = 0; i < CONNECTIONS; i++) {
                try (Raw r = Raw.connect(address(m), loopback(2 + i % 40))) {
                    assertEquals(STATUS_SHUTTING_DOWN, r.hello(TOKEN, NAME + i).status(), "a draining memserver");
                }
            }
            assertNoForgedLine("memserver", m.process().log(), before);
        }
    }

    static final int STATUS_SHUTTING_DOWN = 8;

    /** The log has no line starting with the forged text, and the attack added at most {@link #LINES_BOUND} lines. */
    static void assertNoForgedLine(String who, String log, long linesBefore) {
        List<String> lines = log.lines().toList();
        List<String> forged = lines.stream().filter(l -> l.startsWith(FORGED)).toList();
        assertTrue(forged.isEmpty(), () -> "the " + who + "'s log has " + forged.size() + " forged line(s), e.g. "
                + forged.getFirst());
        long added = lines.size() - linesBefore;
        assertTrue(added <= LINES_BOUND, () -> "the " + who + " logged " + added + " lines for " + CONNECTIONS
                + " connections, e.g. " + lines.subList((int) linesBefore, (int) Math.min(lines.size(),
                        linesBefore + 3)));
        assertTrue(log.length() < (1 << 20), "the " + who + "'s log is " + log.length() + " characters");
    }
}
