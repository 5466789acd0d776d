package dev.rbridge.memserver;

/**
 * A volume lease as an operator sees it ({@link Memserver#leases}). {@code state}: {@code held} (live), {@code expired}
 * (not renewed within its ttl), {@code released} (its holder's connection ended) or {@code given back}; only a held
 * lease binds anyone.
 */
public record LeaseView(String volume, String owner, long clientId, String clientName, String address,
        String state, long ttlMillis, long remainingMillis) {
}
