package dev.rbridge.rdma;

/**
 * An ownership lease on a volume as granted by one memserver: valid for {@code ttlMillis} from the grant unless renewed
 * (the ttl granted: the one asked for, at most a year). {@code tookOver} is true when the grant ended another owner's
 * expired or abandoned lease (its keys were rotated: reopen the volume's regions for the new keys); a renewal, or a
 * lease given back with {@code unlease} and then taken, is no takeover.
 */
public record Lease(String volume, String owner, long ttlMillis, boolean tookOver) {
}
