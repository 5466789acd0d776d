package dev.rbridge.cli;

import dev.rbridge.nbd.server.ListenAddress;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.List;

/**
 * Whether a listener can be reached from other hosts, for the start-up refusals of servers that would be open to
 * anyone there: a memserver without a token, an NBD server without client authentication. {@code --insecure} says it
 * is meant.
 */
final class Exposure {
    private Exposure() {}

    /** A host that only this machine reaches (a loopback address or a name for one). Wildcards are not. */
    static boolean loopback(String host) {
        try {
            for (InetAddress a : InetAddress.getAllByName(host)) {
                if (!a.isLoopbackAddress()) {
                    return false;
                }
            }
            return true;
        } catch (UnknownHostException e) {
            return false; // unknown: the bind will say so, and nothing is assumed safe
        }
    }

    /** The first TCP address of {@code addresses} other hosts may reach, or null. Unix sockets are local. */
    static ListenAddress.Tcp exposed(List<ListenAddress> addresses) {
        for (ListenAddress a : addresses) {
            if (a instanceof ListenAddress.Tcp t && !loopback(t.host())) {
                return t;
            }
        }
        return null;
    }
}
