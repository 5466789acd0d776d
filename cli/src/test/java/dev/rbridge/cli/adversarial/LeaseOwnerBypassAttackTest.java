package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A client with the token and the bridge's owner string, against the volume the bridge serves. The LEASE_HELD a
 * memserver answered named the holder's owner string, and a LEASE presenting that string from another connection
 * moved the live lease to the caller without rotating the keys: it could then open the volume's regions and read and
 * write them while the bridge noticed nothing. Now a lease belongs to the connection that holds it, refusals name no
 * holder, and the owner string opens nothing.
 */
@Timeout(300)
class LeaseOwnerBypassAttackTest extends MemserverAttackTest {
    private static final Pattern NAMED_IN_ERROR = Pattern.compile("leased by '([^']+)'");
    private static final Pattern NAMED_IN_LOG = Pattern.compile("leased to '([^']+)'");

    /** The regions of {@code volume} in a LIST reply. */
    static List<Long> regionsOf(Reply list, String volume) {
        ByteBuffer b = list.body();
        int count = b.getInt();
        List<Long> out = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            long id = b.getLong();
            b.getLong(); // length
            b.getLong(); // key, withheld
            byte[] v = new byte[Short.toUnsignedInt(b.getShort())];
            b.get(v);
            b.getLong();
            b.getInt();
            b.getLong();
            b.position(b.position() + Short.toUnsignedInt(b.getShort())); // the owner
            if (new String(v, StandardCharsets.UTF_8).equals(volume)) {
                out.add(id);
            }
        }
        return out;
    }

    @Test
    void theOwnerStringOpensNeitherTheLeaseNorTheData() throws Exception {
        try (ServeCluster c = start(cluster("owner-bypass")); WellBehavedClient w = wellBehaved(c, VOLUME)) {
            for (ServeCluster.Memserver m : c.memservers()) {
                try (Raw r = Raw.connect(address(m), loopback(11))) {
                    assertEquals(0, r.hello(TOKEN, "bypass").status());
                    Reply held = r.lease(VOLUME, "attacker", 30_000);
                    assertEquals(STATUS_LEASE_HELD, held.status(), held.message());
                    // The bridge's owner string: memservers used to name it in this very error; failing that, the
                    // worst case is assumed: the attacker read it somewhere (here: the memserver's log).
                    Matcher named = NAMED_IN_ERROR.matcher(held.message());
                    Matcher logged = NAMED_IN_LOG.matcher(m.process().log());
                    String owner = named.find() ? named.group(1) : logged.find() ? logged.group(1) : null;
                    assertNotNull(owner, "the bridge's owner string is nowhere to be found");

                    Reply bypass = r.lease(VOLUME, owner, 30_000);
                    assertEquals(STATUS_LEASE_HELD, bypass.status(), "a client presenting the bridge's owner string "
                            + "from another connection took its lease of volume " + VOLUME + " on " + m.address());
                    assertEquals(0, r.unlease(VOLUME, owner).status()); // not the holder's connection: a no-op
                    assertEquals(STATUS_LEASE_HELD, r.lease(VOLUME, owner, 30_000).status());

                    List<Reply> refusals = new ArrayList<>(List.of(held, bypass));
                    List<Long> regions = regionsOf(r.call(LIST, r.body(0)), VOLUME);
                    assertFalse(regions.isEmpty(), "the bridge's regions on " + m.address());
                    for (long region : regions) {
                        Reply open = r.call(OPEN, r.body(8).putLong(region));
                        assertEquals(STATUS_ACCESS_DENIED, open.status(), "OPEN of the bridge's region " + region);
                        Reply read = r.call(READ, r.body(28).putLong(region).putLong(0).putLong(0).putInt(4096));
                        assertEquals(STATUS_ACCESS_DENIED, read.status(), "READ of region " + region + " (key 0)");
                        Reply write = r.call(WRITE, r.body(32).putLong(region).putLong(0).putLong(0).putLong(-1));
                        assertEquals(STATUS_ACCESS_DENIED, write.status(), "WRITE of region " + region + " (key 0)");
                        refusals.add(open);
                    }
                    for (Reply refusal : refusals) {
                        String text = refusal.message();
                        assertFalse(text.contains(owner) || text.contains("rbridge-bridge")
                                || text.contains(" at 127.0.0.1") || text.matches("(?s).*client \\d.*"),
                                "a refusal tells the attacker about the holder: " + text);
                    }
                }
            }
            w.assertServedWithin(SERVED_WITHIN);
            assertEquals("healthy", c.volume(VOLUME).get("state"), "the bridge's volume: " + c.volume(VOLUME));
            assertFalse(c.bridge().log().contains("stops serving"), "the bridge fenced its volume");
            assertServesAsBefore(c, w);
        }
    }
}
