package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * A client with the token takes a volume's lease on one memserver while the bridge's connection there is down, under
 * the bridge's own owner string (which memservers print in their log and admin), writes into the volume's regions and
 * gives the lease back. The bridge used to decide whether someone else had its volume there by counting changes of
 * owner string, so it reconnected, saw no change and served on from a view of the volume that someone else had
 * changed. Now it presents the secret id of its last grant, the memserver says the grant does not continue it, and
 * the bridge fences the volume.
 */
@Timeout(300)
class LeaseOwnerStringAttackTest extends MemserverAttackTest {
    private static final Pattern LEASED_TO = Pattern.compile("volume '" + VOLUME + "': leased to '([^']+)'");
    private final HttpClient http = HttpClient.newHttpClient();

    @Test
    void aBridgeFencesWhenAnotherClientHadItsVolumeWhateverOwnerStringItPresented() throws Exception {
        PeerTool.require("nbdsh", "libnbd-bin");
        try (ServeCluster c = start(cluster("owner-string").memserverAdmin(true))) {
            assertEquals(0, LeaseTakeoverAttackTest.nbdsh(c, VOLUME, "h.pwrite(b'\\x42' * 65536, 0)").exitCode());
            ServeCluster.Memserver m = c.memserver(0);
            Matcher named = LEASED_TO.matcher(m.process().log());
            assertTrue(named.find(), "the memserver logs the bridge's owner string:\n" + m.process().log());
            String owner = named.group(1);
            List<Long> bridge = bridgeClients(m);

            c.bridge().freeze(); // so that its reconnect comes only after the intruder is done
            try (Raw intruder = Raw.connect(address(m), loopback(21))) {
                assertEquals(0, intruder.hello(TOKEN, "intruder").status());
                for (long id : bridge) { // every lane: the lease there ends with its connection
                    post(m, "/clients/" + id + "/disconnect");
                }
                Reply lease = null;
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (System.nanoTime() < deadline && (lease = intruder.lease(VOLUME, owner, 60_000)).status() != 0) {
                    Thread.sleep(50);
                }
                assertEquals(0, lease.status(), "the lease after the bridge's connection ended: " + lease.message());
                List<Long> regions = LeaseOwnerBypassAttackTest.regionsOf(intruder.call(LIST, intruder.body(0)),
                        VOLUME);
                assertFalse(regions.isEmpty());
                Reply open = intruder.call(OPEN, intruder.body(8).putLong(regions.getFirst()));
                assertEquals(0, open.status(), open.message());
                long key = open.body().getLong(16);
                Reply write = intruder.call(WRITE, intruder.body(24 + 8).putLong(regions.getFirst()).putLong(key)
                        .putLong(0).putLong(0x6666666666666666L));
                assertEquals(0, write.status(), write.message());
                assertEquals(0, intruder.unlease(VOLUME, owner).status());
            } finally {
                c.bridge().thaw();
            }

            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!"fenced".equals(c.volume(VOLUME).get("state"))) {
                if (System.nanoTime() > deadline) {
                    fail("30 s after another client had volume " + VOLUME + " on " + m.address() + " under the "
                            + "bridge's owner string, the bridge still serves it: " + c.volume(VOLUME) + "\n"
                            + c.logs());
                }
                Thread.sleep(200);
            }
            assertNotEquals(0, LeaseTakeoverAttackTest.nbdsh(c, VOLUME, "h.pread(4096, 0)").exitCode(),
                    "a fenced volume fails reads");
            assertTrue(c.bridge().log().contains("not as a continuation") || c.bridge().log().contains("since this "
                    + "one did"), "the bridge says why:\n" + c.bridge().log());
        }
    }

    /** The ids of the bridge's connections on memserver {@code m}, from its admin interface. */
    @SuppressWarnings("unchecked")
    private List<Long> bridgeClients(ServeCluster.Memserver m) throws Exception {
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://" + m.adminAddress()
                + "/clients")).header("Authorization", "Bearer " + TOKEN).timeout(Duration.ofSeconds(5))
                .build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), r.body());
        List<Long> ids = new java.util.ArrayList<>();
        for (Map<String, Object> client : (List<Map<String, Object>>) ServeCluster.Json.parse(r.body())) {
            if (String.valueOf(client.get("name")).startsWith("rbridge-bridge")) {
                ids.add(((Number) client.get("id")).longValue());
            }
        }
        assertFalse(ids.isEmpty(), "no bridge among the clients of " + m.address() + ": " + r.body());
        return ids;
    }

    private void post(ServeCluster.Memserver m, String path) throws Exception {
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://" + m.adminAddress() + path))
                .header("Authorization", "Bearer " + TOKEN).POST(HttpRequest.BodyPublishers.noBody())
                .timeout(Duration.ofSeconds(5)).build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), "POST " + path + ": " + r.body());
    }
}
