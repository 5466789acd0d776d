package dev.rbridge.memserver;

import dev.rbridge.common.Printable;
import dev.rbridge.common.RateLimitedLog;
import dev.rbridge.rdma.RegionService.Credential;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.slf4j.LoggerFactory;

import java.net.SocketAddress;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Which peers the {@link Memserver} takes as clients: none while it drains, and only those that know its token when
 * it has one. Counts the peers turned away, here and by the transport, by reason.
 */
final class ClientAdmission {
    /** Peers can cause these lines (wrong tokens): at most one per reason every few seconds. */
    private static final RateLimitedLog limited = new RateLimitedLog(LoggerFactory.getLogger(Memserver.class));

    /** The token clients must prove they know, or null for none. */
    private final String token;
    private final AtomicLong refusedAuth = new AtomicLong();
    /** Refused peers by reason ({@code token}, {@code draining}, and the transport's reasons). */
    private final Map<String, AtomicLong> refused = new ConcurrentHashMap<>();

    ClientAdmission(String token) {
        this.token = token;
    }

    /** Lets the peer in, or counts, logs and says why not. */
    void admit(Credential credential, String clientName, SocketAddress peer, boolean draining)
            throws RemoteMemoryException {
        if (draining) {
            refused("draining");
            limited.info("draining", "refused client '{}' from {}: draining", Printable.cut(clientName,
                    Memserver.MAX_CLIENT_NAME), peer);
            throw new RemoteMemoryException(Status.SHUTTING_DOWN, "memserver is draining; no new clients");
        }
        if (token != null && !credential.matches(token)) {
            refusedAuth.incrementAndGet();
            refused("token");
            limited.warn("token", "refused client '{}' from {}: wrong token", Printable.cut(clientName,
                    Memserver.MAX_CLIENT_NAME), peer);
            throw new RemoteMemoryException(Status.AUTH_FAILED, "wrong token");
        }
    }

    /** Counts a peer turned away for {@code reason}. */
    void refused(String reason) {
        refused.computeIfAbsent(reason, k -> new AtomicLong()).incrementAndGet();
    }

    /** Peers refused for a wrong token since start. */
    long refusedAuth() {
        return refusedAuth.get();
    }

    /** Peers refused since start, by reason, sorted. */
    Map<String, Long> refusedByReason() {
        Map<String, Long> refusedNow = new TreeMap<>();
        refused.forEach((k, v) -> refusedNow.put(k, v.get()));
        return Map.copyOf(refusedNow);
    }
}
