package dev.rbridge.cli.adversarial;

import dev.rbridge.cli.serve.ServeCluster;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Silent connections from the bridge's own address (a local process, or a NAT the bridge sits behind), as many as
 * the memserver lets one address hold before authenticating, reopened as soon as they are dropped. The memserver
 * refused newcomers from a full address, so while the attack held its eight places the bridge could not reconnect
 * after losing its link: its replicas there stayed out and the volume degraded. Now a newcomer from a full address
 * takes the place of that address's oldest unauthenticated connection, and an honest client's greeting, one round
 * trip long, is always the newest.
 */
@Timeout(300)
class MemserverSameAddressAttackTest extends MemserverAttackTest {
    /** A link cut to a reachable memserver: the health duty notices at once and reconnects within a second or so. */
    static final Duration BACK_WITHIN = Duration.ofSeconds(5);
    /** What one address may hold unauthenticated (ConnectionLimits.MAX_UNAUTHENTICATED_PER_PEER_DEFAULT). */
    static final int PER_ADDRESS = 8;

    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    @Test
    void silentConnectionsFromTheBridgesAddressCannotKeepItFromReconnecting() throws Exception {
        try (ServeCluster c = start(cluster("same-address").memserverAdmin(true));
                WellBehavedClient w = wellBehaved(c, VOLUME);
                Flood flood = new Flood(c)) {
            flood.awaitOpened(PER_ADDRESS * c.memservers().size() * 2, Duration.ofSeconds(30));
            for (ServeCluster.Memserver m : c.memservers()) {
                Set<Long> before = bridgeClients(m);
                assertTrue(!before.isEmpty(), "no bridge among memserver " + m.address() + "'s clients");
                for (long id : before) {
                    post(m, "/clients/" + id + "/disconnect");
                }
                long cut = System.nanoTime();
                long deadline = cut + BACK_WITHIN.toNanos();
                Set<Long> now = bridgeClients(m);
                while (!hasNew(now, before) && System.nanoTime() < deadline) {
                    Thread.sleep(50);
                    now = bridgeClients(m);
                }
                assertTrue(hasNew(now, before), "the bridge did not reconnect to memserver " + m.address()
                        + " within " + BACK_WITHIN.toMillis() + " ms while connections from its address held the "
                        + "places (refused: " + refusedReasons(m) + ")\n" + c.logs());
                System.out.printf("memserver %s: the bridge was back %d ms after its link was cut%n", m.address(),
                        TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - cut));
                w.assertServedWithin(SERVED_WITHIN);
                assertNewClientServed(m); // a tool on the bridge's host gets in as well
                awaitHealthy(c, Duration.ofSeconds(60));
                assertDirectMemoryBounded(c);
            }
            assertTrue(flood.reopened.get() > 0, "the attack never had a connection dropped: it did not fill the "
                    + "address's places");
            flood.close();
            w.awaitCycles(20, Duration.ofSeconds(30));
            w.assertServedWithin(SERVED_WITHIN);
            awaitHealthy(c, Duration.ofSeconds(60));
            for (ServeCluster.Memserver m : c.memservers()) {
                assertNewClientServed(m);
                assertTrue(refused(m, "unauthenticated_peer_limit") > 0, "memserver " + m.address()
                        + " counted no connection of the attack as making way: " + refusedReasons(m));
            }
        }
    }

    /**
     * The attack: {@value #PER_ADDRESS} connections to every memserver from 127.0.0.1, each starting a header and
     * saying no more, every one the memserver drops opened again within a few tens of milliseconds.
     */
    private static final class Flood implements AutoCloseable {
        final AtomicLong opened = new AtomicLong();
        final AtomicLong reopened = new AtomicLong();
        private final Thread thread;
        private volatile boolean stop;

        Flood(ServeCluster c) {
            List<ServeCluster.Memserver> targets = c.memservers();
            thread = Thread.ofPlatform().name("same-address-flood").daemon().start(() -> run(targets));
        }

        private void run(List<ServeCluster.Memserver> targets) {
            List<List<Raw>> held = new ArrayList<>();
            targets.forEach(m -> held.add(new ArrayList<>()));
            try {
                while (!stop) {
                    for (int i = 0; i < targets.size(); i++) {
                        List<Raw> mine = held.get(i);
                        mine.removeIf(r -> {
                            boolean gone;
                            try {
                                gone = r.closedByServer(1);
                            } catch (IOException e) {
                                gone = true;
                            }
                            if (gone) {
                                r.close();
                                reopened.incrementAndGet();
                            }
                            return gone;
                        });
                        while (mine.size() < PER_ADDRESS && !stop) {
                            try {
                                Raw r = Raw.connect(address(targets.get(i)), "127.0.0.1");
                                r.raw(new byte[]{0x52, 0x42, 0x52}); // the first bytes of a header, and no more
                                mine.add(r);
                                opened.incrementAndGet();
                            } catch (IOException e) {
                                break; // try again on the next round
                            }
                        }
                    }
                    Thread.sleep(20);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                held.forEach(l -> l.forEach(Raw::close));
            }
        }

        void awaitOpened(int n, Duration timeout) throws InterruptedException {
            long deadline = System.nanoTime() + timeout.toNanos();
            while (opened.get() < n && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            assertTrue(opened.get() >= n, "the attack opened only " + opened.get() + " connections");
        }

        @Override
        public void close() throws InterruptedException {
            stop = true;
            thread.join(10_000);
        }
    }

    private static boolean hasNew(Set<Long> now, Set<Long> before) {
        return now.stream().anyMatch(id -> !before.contains(id));
    }

    /** The ids of memserver {@code m}'s clients that are the bridge, from its admin interface. */
    @SuppressWarnings("unchecked")
    private Set<Long> bridgeClients(ServeCluster.Memserver m) throws Exception {
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://" + m.adminAddress()
                + "/clients")).header("Authorization", "Bearer " + TOKEN).timeout(Duration.ofSeconds(5)).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), r.body());
        Set<Long> ids = new HashSet<>();
        for (Map<String, Object> client : (List<Map<String, Object>>) ServeCluster.Json.parse(r.body())) {
            if (String.valueOf(client.get("name")).startsWith("rbridge-bridge")) {
                ids.add(((Number) client.get("id")).longValue());
            }
        }
        return ids;
    }

    private void post(ServeCluster.Memserver m, String path) throws Exception {
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://" + m.adminAddress() + path))
                .header("Authorization", "Bearer " + TOKEN).POST(HttpRequest.BodyPublishers.noBody())
                .timeout(Duration.ofSeconds(5)).build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), "POST " + path + ": " + r.body());
    }

    private static String refusedReasons(ServeCluster.Memserver m) throws Exception {
        StringBuilder b = new StringBuilder();
        for (String line : Scrape.metrics(m.metricsAddress()).split("\n")) {
            if (line.startsWith("rbridge_memserver_refused_connections_total{") && !line.endsWith(" 0.0")) {
                int reason = line.indexOf("reason=\"") + 8;
                b.append(line, reason, line.indexOf('"', reason)).append(' ')
                        .append(line.substring(line.lastIndexOf(' ') + 1)).append("; ");
            }
        }
        return b.toString();
    }

    /** Every memserver reachable and no slab degraded, rebuilding or lost, from the bridge's metrics. */
    private static void awaitHealthy(ServeCluster c, Duration timeout) throws Exception {
        long deadline = System.nanoTime() + timeout.toNanos();
        String why;
        do {
            String metrics = Scrape.metrics(c.metricsAddress());
            double reachable = Scrape.sum(metrics, "rbridge_memserver_reachable");
            double unwell = 0;
            for (String state : new String[]{"degraded", "rebuilding", "lost"}) {
                unwell += Scrape.sum(metrics, "rbridge_volume_slabs", "state=\"" + state + "\"");
            }
            if (reachable == c.memservers().size() && unwell == 0) {
                return;
            }
            why = reachable + " memserver(s) reachable, " + unwell + " slab(s) not healthy";
            Thread.sleep(100);
        } while (System.nanoTime() < deadline);
        throw new AssertionError("not healthy within " + timeout + ": " + why + "\n" + c.logs());
    }
}
