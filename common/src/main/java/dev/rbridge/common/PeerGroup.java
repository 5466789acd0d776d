package dev.rbridge.common;

import java.net.Inet6Address;
import java.net.InetAddress;

/**
 * What the per-peer limits of every listener (NBD, the memserver's, the ops HTTP servers') count by: an IPv4 address,
 * or the /64 prefix of an IPv6 one, since a host usually has a whole /64 and counting by address would give it 2^64
 * shares. IPv6 loopback (::1) is its own group. {@link #toString} is how a log line names it.
 */
public record PeerGroup(String name) {
    public static PeerGroup of(InetAddress a) {
        if (a instanceof Inet6Address && !a.isLoopbackAddress()) {
            byte[] b = a.getAddress();
            return new PeerGroup(String.format("%x:%x:%x:%x::/64", ((b[0] & 0xff) << 8) | (b[1] & 0xff),
                    ((b[2] & 0xff) << 8) | (b[3] & 0xff), ((b[4] & 0xff) << 8) | (b[5] & 0xff),
                    ((b[6] & 0xff) << 8) | (b[7] & 0xff)));
        }
        return new PeerGroup(a.getHostAddress());
    }

    @Override
    public String toString() {
        return name;
    }
}
