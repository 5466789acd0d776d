package dev.rbridge.memserver;

import org.junit.jupiter.api.Test;

import java.net.InetSocketAddress;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A config shown in a log or an error shows everything but its token. */
class MemserverConfigTest {
    @Test
    void theTokenIsNeverShown() {
        MemserverConfig c = new MemserverConfig(new InetSocketAddress("127.0.0.1", 7471), 1L << 30,
                "TOP-SECRET-TOKEN", "tcp");
        assertFalse(c.toString().contains("TOP-SECRET-TOKEN"), c.toString());
        assertTrue(c.toString().contains("token=(withheld)") && c.toString().contains("capacityBytes=1073741824"),
                c.toString());
        assertTrue(new MemserverConfig(new InetSocketAddress("127.0.0.1", 7471), 1L << 30, null, "tcp").toString()
                .contains("token=none"));
    }
}
