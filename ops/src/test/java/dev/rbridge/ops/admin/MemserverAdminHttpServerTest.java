package dev.rbridge.ops.admin;

import dev.rbridge.memserver.Memserver;
import dev.rbridge.memserver.MemserverConfig;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.local.LocalProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The memserver's admin interface shows what an operator needs about regions and leases. */
@Timeout(60)
class MemserverAdminHttpServerTest {
    private static final String TOKEN = "admin-secret";

    private static String get(HttpClient http, MemserverAdminHttpServer admin, String path) throws Exception {
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:"
                + admin.address().getPort() + "/" + path)).header("Authorization", "Bearer " + TOKEN).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), r.body());
        return r.body().trim();
    }

    private static HttpResponse<String> post(HttpClient http, MemserverAdminHttpServer admin, String path)
            throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + admin.address().getPort() + "/"
                + path)).header("Authorization", "Bearer " + TOKEN).POST(HttpRequest.BodyPublishers.noBody())
                .build(), HttpResponse.BodyHandlers.ofString());
    }

    @Test
    void aRegionIsRevokedAndAClientDisconnectedByIdAndAnUnknownIdIsA404() throws Exception {
        try (Memserver m = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 64L << 20, TOKEN,
                "local"));
                MemserverAdminHttpServer admin = new MemserverAdminHttpServer(new InetSocketAddress("127.0.0.1", 0), m,
                        TOKEN, () -> {
                        });
                HttpClient http = HttpClient.newHttpClient();
                RemoteConnection c = new LocalProvider().connect(new ConnectParams().address(m.address()).token(TOKEN)
                        .clientName("admin-test"))) {
            RegionDescriptor r = c.allocate(new RegionTag("vol", 0, 0, 1), 4096).get();
            long clientId = m.clients().getFirst().id();

            HttpResponse<String> revoked = post(http, admin, "regions/" + r.id() + "/revoke");
            assertEquals(200, revoked.statusCode(), revoked.body());
            assertEquals("{\"revoked\":" + r.id() + "}", revoked.body().trim());
            assertEquals(0, m.regionCount(), "the region is gone");
            HttpResponse<String> again = post(http, admin, "regions/" + r.id() + "/revoke");
            assertEquals(404, again.statusCode(), again.body());
            assertEquals("{\"error\":\"no region " + r.id() + "\"}", again.body().trim());

            HttpResponse<String> cut = post(http, admin, "clients/" + clientId + "/disconnect");
            assertEquals(200, cut.statusCode(), cut.body());
            assertEquals("{\"disconnected\":" + clientId + "}", cut.body().trim());
            HttpResponse<String> unknown = post(http, admin, "clients/" + (clientId + 1000) + "/disconnect");
            assertEquals(404, unknown.statusCode(), unknown.body());
            assertEquals("{\"error\":\"no client " + (clientId + 1000) + "\"}", unknown.body().trim());
        }
    }

    @Test
    void regionsShowTheirGenerationAndLeasesTheirHolderAndTimeLeft() throws Exception {
        try (Memserver m = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 64L << 20, TOKEN,
                "local"));
                MemserverAdminHttpServer admin =
                        new MemserverAdminHttpServer(new InetSocketAddress("127.0.0.1", 0), m, TOKEN, () -> {
                        });
                HttpClient http = HttpClient.newHttpClient()) {
            assertEquals("[]", get(http, admin, "leases"));
            long clientId;
            try (RemoteConnection c = new LocalProvider().connect(new ConnectParams().address(m.address()).token(TOKEN)
                    .clientName("admin-test"))) {
                clientId = m.clients().getFirst().id();
                c.lease("vol\"1", "bridge-x", Duration.ofSeconds(60)).get();
                RegionDescriptor r = c.allocate(new RegionTag("vol\"1", 2, 1, 3), 4096).get();
                c.retag(r, new RegionTag("vol\"1", 2, 1, 8)).get();

                String regions = get(http, admin, "regions");
                assertTrue(regions.contains("\"volume\":\"vol\\\"1\",\"slab\":2,\"replica\":1,\"generation\":8"),
                        regions);

                String leases = get(http, admin, "leases");
                assertTrue(leases.startsWith("[{\"volume\":\"vol\\\"1\",\"owner\":\"bridge-x\",\"client_id\":"
                        + clientId + ",\"client_name\":\"admin-test\","), leases);
                assertTrue(leases.contains("\"state\":\"held\",\"ttl_ms\":60000,"), leases);
                Matcher left = Pattern.compile("\"remaining_ms\":(\\d+)").matcher(leases);
                assertTrue(left.find(), leases);
                long remaining = Long.parseLong(left.group(1));
                assertTrue(remaining > 50_000 && remaining <= 60_000, leases);
            }
            String after = get(http, admin, "leases");
            assertTrue(after.contains("\"state\":\"released\"") && after.contains("\"remaining_ms\":0"),
                    "a closed connection's lease binds nobody: " + after);
        }
    }
}
