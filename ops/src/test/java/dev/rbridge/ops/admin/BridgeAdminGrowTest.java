package dev.rbridge.ops.admin;

import dev.rbridge.bridge.Bridge;
import dev.rbridge.bridge.BridgeConfig;
import dev.rbridge.bridge.volume.VolumeSpec;
import dev.rbridge.memserver.Memserver;
import dev.rbridge.memserver.MemserverConfig;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The admin's grow with sizes no volume can grow to: the slab count and the allocation manifest's words are computed
 * in long arithmetic, so 2^31-1 slabs is a clear 400 (it overflowed, passed the manifest check and died of
 * OutOfMemoryError making the slab array: a 500), and so are Long.MAX_VALUE bytes and sizes that are not sizes; the
 * volume keeps its size and slabs, and a sensible grow still works after all of them.
 */
@Timeout(60)
class BridgeAdminGrowTest {
    private static final String TOKEN = "grow-secret";
    private static final long MIB = 1 << 20;

    private Memserver memserver;
    private Bridge bridge;
    private BridgeAdminHttpServer admin;
    private HttpClient http;

    @BeforeEach
    void start() throws Exception {
        memserver = Memserver.start(new MemserverConfig(new InetSocketAddress("127.0.0.1", 0), 64 * MIB, TOKEN,
                "local"));
        bridge = Bridge.start(BridgeConfig.builder().transport("local").token(TOKEN).startWait(Duration.ZERO)
                .operationTimeout(Duration.ofSeconds(2)).memserver(memserver.address())
                .volume(new VolumeSpec("disk", 16 * MIB, MIB, 1, false, 1, "")).build());
        admin = new BridgeAdminHttpServer(new InetSocketAddress("127.0.0.1", 0), bridge);
        http = HttpClient.newHttpClient();
    }

    @AfterEach
    void stop() {
        http.close();
        admin.close();
        bridge.close();
        memserver.close();
    }

    private HttpResponse<String> grow(String bytes) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + admin.address().getPort()
                + "/volumes/disk/grow/" + bytes)).header("Authorization", "Bearer " + TOKEN)
                .POST(HttpRequest.BodyPublishers.noBody()).timeout(Duration.ofSeconds(20)).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    private void assertRefusedWith400(String bytes) throws Exception {
        HttpResponse<String> r = grow(bytes);
        assertEquals(400, r.statusCode(), "grow to " + bytes + ": " + r.body());
        assertTrue(r.body().contains("\"error\""), r.body());
        assertEquals(16 * MIB, bridge.volume("disk").size(), "the volume's size after grow to " + bytes);
        assertEquals(16, bridge.volume("disk").slabCount(), "the volume's slabs after grow to " + bytes);
    }

    @Test
    void hugeAndNegativeSizesAreA400AndAllocateNothing() throws Exception {
        assertRefusedWith400(Long.toString(((1L << 31) - 1) * MIB)); // 2^31-1 slabs of 1 MiB
        assertRefusedWith400(Long.toString((1L << 31) * MIB)); // one slab more than an int counts
        assertRefusedWith400(Long.toString(Long.MAX_VALUE));
        assertRefusedWith400(Long.toString(Long.MIN_VALUE));
        assertRefusedWith400("-1");
        assertRefusedWith400("0");
        assertRefusedWith400("9223372036854775808"); // Long.MAX_VALUE + 1
        assertRefusedWith400(Long.toString(64L << 30)); // 65536 slabs: more than the manifest's page holds serving

        HttpResponse<String> r = grow(Long.toString(32 * MIB));
        assertEquals(200, r.statusCode(), r.body());
        assertEquals(32, bridge.volume("disk").slabCount());
    }

    @Test
    void growingToTheSizeItHasIsAConflictNotABadSize() throws Exception {
        assertEquals(409, grow(Long.toString(16 * MIB)).statusCode());
    }
}
