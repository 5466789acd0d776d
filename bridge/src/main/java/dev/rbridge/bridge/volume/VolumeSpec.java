package dev.rbridge.bridge.volume;

import java.nio.charset.StandardCharsets;
import java.util.Objects;

/**
 * One volume as configured: an NBD export of {@code size} bytes cut into slabs of {@code slabSize}, each kept on
 * {@code replicas} memservers.
 */
public record VolumeSpec(String name, long size, long slabSize, int replicas, boolean readOnly, int minimumBlockSize,
        String description) {
    public static final long DEFAULT_SLAB_SIZE = 64L << 20;
    public static final long MIN_SLAB_SIZE = 1L << 20;

    public VolumeSpec {
        Objects.requireNonNull(name, "name");
        description = description == null ? "" : description;
        if (name.isEmpty() || name.getBytes(StandardCharsets.UTF_8).length > 255
                || name.indexOf('\0') >= 0 || name.indexOf('/') >= 0) {
            throw new IllegalArgumentException("volume name must be 1-255 bytes without NUL or '/': '" + name + "'");
        }
        if (size <= 0) {
            throw new IllegalArgumentException("volume '" + name + "': size must be positive");
        }
        if (Long.bitCount(slabSize) != 1 || slabSize < MIN_SLAB_SIZE || slabSize > (1L << 34)) {
            throw new IllegalArgumentException(
                    "volume '" + name + "': slab size must be a power of two from 1M to 16G: "
                            + slabSize);
        }
        if (size / slabSize + (size % slabSize != 0 ? 1 : 0) > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("volume '" + name + "': too many slabs; use a larger slab size");
        }
        if (replicas < 1 || replicas > 8) {
            throw new IllegalArgumentException("volume '" + name + "': replicas must be 1 to 8: " + replicas);
        }
        if (size % Math.max(minimumBlockSize, 1) != 0) {
            throw new IllegalArgumentException(
                    "volume '" + name + "': size is not a multiple of the minimum block size");
        }
    }

    public int slabCount() {
        return (int) (size / slabSize + (size % slabSize != 0 ? 1 : 0)); // no overflow near Long.MAX_VALUE
    }
}
