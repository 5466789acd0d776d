package dev.rbridge.common;

import org.junit.jupiter.api.Test;

import java.net.InetAddress;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

class PeerGroupTest {
    private static PeerGroup of(String address) throws Exception {
        return PeerGroup.of(InetAddress.getByName(address));
    }

    @Test
    void ipv4ByAddress() throws Exception {
        assertEquals("10.0.0.1", of("10.0.0.1").toString());
        assertNotEquals(of("10.0.0.1"), of("10.0.0.2"));
        assertEquals(of("127.0.0.1"), of("127.0.0.1"));
    }

    @Test
    void ipv6BySlashSixtyFour() throws Exception {
        assertEquals("2001:db8:0:1::/64", of("2001:db8:0:1::1").toString());
        assertEquals(of("2001:db8:0:1::1"), of("2001:db8:0:1:ffff:ffff:ffff:ffff"));
        assertNotEquals(of("2001:db8:0:1::1"), of("2001:db8:0:2::1"));
        assertNotEquals(of("2001:db8:0:1::1"), of("2001:db9:0:1::1"));
        assertEquals(of("fe80::1%1").name(), "fe80:0:0:0::/64");
    }

    @Test
    void ipv6LoopbackAndMappedIpv4() throws Exception {
        assertEquals("0:0:0:0:0:0:0:1", of("::1").toString());
        assertEquals(of("1.2.3.4"), of("::ffff:1.2.3.4")); // Java reads a mapped address as the IPv4 one
    }
}
