package dev.rbridge.rdma;

import java.util.Objects;

/**
 * What a region holds, so a restarted bridge can find its data again: which volume, which slab of it, which replica,
 * and the generation that tells a current replica from a stale one.
 */
public record RegionTag(String volume, long slab, int replica, long generation) {
    public static final int MAX_VOLUME_NAME = 255;

    public RegionTag {
        Objects.requireNonNull(volume, "volume");
        if (volume.getBytes(java.nio.charset.StandardCharsets.UTF_8).length > MAX_VOLUME_NAME) {
            throw new IllegalArgumentException("volume name longer than " + MAX_VOLUME_NAME + " bytes");
        }
    }

    /** A tag for memory that belongs to no volume (tools such as ping and bench). */
    public static RegionTag scratch(String purpose) {
        return new RegionTag(purpose, 0, 0, 0);
    }
}
