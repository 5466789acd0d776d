package dev.rbridge.nbd.server;

import dev.rbridge.nbd.device.BlockDevice;

import java.util.Objects;

/**
 * One named export: a device and how it is offered. Block sizes follow NBD_INFO_BLOCK_SIZE: requests must be aligned
 * to {@code minimumBlockSize}; READ and WRITE may carry at most {@code maximumPayload} bytes.
 */
public record Export(String name, String description, BlockDevice device, boolean readOnly, int minimumBlockSize,
        int preferredBlockSize, int maximumPayload) {
    public static final int DEFAULT_PREFERRED_BLOCK_SIZE = 4096;
    public static final int DEFAULT_MAXIMUM_PAYLOAD = 32 * 1024 * 1024;

    public Export {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(device, "device");
        description = description == null ? "" : description;
        if (name.getBytes(java.nio.charset.StandardCharsets.UTF_8).length
                > dev.rbridge.nbd.protocol.Nbd.MAX_STRING_LENGTH
                || name.indexOf('\0') >= 0) {
            throw new IllegalArgumentException("export name must be at most 4096 bytes of UTF-8 without NUL");
        }
        requirePowerOfTwo("minimum block size", minimumBlockSize, 1, 65536);
        requirePowerOfTwo("preferred block size", preferredBlockSize, Math.max(512, minimumBlockSize), 1 << 25);
        if (maximumPayload < preferredBlockSize || maximumPayload % minimumBlockSize != 0) {
            throw new IllegalArgumentException("maximum payload " + maximumPayload
                    + " must be a multiple of the minimum block size and at least the preferred block size");
        }
        if (device.size() % minimumBlockSize != 0) {
            throw new IllegalArgumentException("export '" + name + "': size " + device.size()
                    + " is not a multiple of the minimum block size " + minimumBlockSize);
        }
    }

    /** A writable export with the default block sizes (minimum 1, preferred 4 KiB, maximum 32 MiB). */
    public static Export of(String name, BlockDevice device) {
        return new Export(name, "", device, false, 1, DEFAULT_PREFERRED_BLOCK_SIZE, DEFAULT_MAXIMUM_PAYLOAD);
    }

    public long size() {
        return device.size();
    }

    private static void requirePowerOfTwo(String what, int value, int min, int max) {
        if (Integer.bitCount(value) != 1 || value < min || value > max) {
            throw new IllegalArgumentException(
                    what + " must be a power of two from " + min + " to " + max + ": " + value);
        }
    }
}
