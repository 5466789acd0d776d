package dev.rbridge.nbd.device;

/** A run of bytes with one {@code base:allocation} state ({@code Nbd.STATE_HOLE}, {@code Nbd.STATE_ZERO} bits). */
public record Extent(long length, int state) {
    public Extent {
        if (length <= 0) {
            throw new IllegalArgumentException("extent length must be positive: " + length);
        }
    }
}
