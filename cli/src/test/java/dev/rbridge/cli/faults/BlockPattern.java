package dev.rbridge.cli.faults;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * What one writer of one round puts into the volume: every 16-byte cell names the writer, the round, the 1 MiB block
 * it belongs to, and its own byte offset in the volume. Bytes found later say whose write they are and whether they
 * landed where they were sent, so a stale write from an earlier owner never reads as the new owner's data.
 *
 * <p>Cell layout, little-endian: {@code u64 mark} ({@code "PT"} in the top 16 bits, then the writer's letter in 8 bits,
 * the round in 16 and the block in 24), {@code u64 volume offset of the cell}.
 */
record BlockPattern(char writer, int round) {
    static final int BLOCK = 1 << 20;
    static final int CELL = 16;
    private static final long MARK = 0x5054L << 48;

    BlockPattern {
        if (writer > 0xFF || round < 0 || round > 0xFFFF) {
            throw new IllegalArgumentException("writer " + writer + ", round " + round);
        }
    }

    /** The whole of block {@code block} (volume offset {@code block * BLOCK}). */
    byte[] block(long block) {
        byte[] b = new byte[BLOCK];
        fill(block * BLOCK, b, BLOCK);
        return b;
    }

    /** Puts into {@code dst[0..length)} what this writer wrote at volume offsets {@code from..from+length}. */
    void fill(long from, byte[] dst, int length) {
        if (from % CELL != 0 || length % CELL != 0) {
            throw new IllegalArgumentException("cells are " + CELL + " bytes: " + from + ", " + length);
        }
        ByteBuffer b = ByteBuffer.wrap(dst).order(ByteOrder.LITTLE_ENDIAN);
        for (int at = 0; at < length; at += CELL) {
            long offset = from + at;
            b.putLong(at, mark(offset / BLOCK)).putLong(at + 8, offset);
        }
    }

    private long mark(long block) {
        if (block >= 1 << 24) {
            throw new IllegalArgumentException("block " + block);
        }
        return MARK | (long) writer << 40 | (long) round << 24 | block;
    }

    /**
     * Whose bytes a cell found at volume offset {@code offset} holds: "A round 3 block 17", with " (shifted by N
     * bytes)" when it was written for another offset, or "zeroes", or the raw bytes when no writer's pattern is there.
     */
    static String describe(long mark, long cellOffset, long offset) {
        if (mark == 0 && cellOffset == 0) {
            return "zeroes";
        }
        if ((mark & 0xFFFF_0000_0000_0000L) != MARK) {
            return String.format("unknown bytes %016x %016x", mark, cellOffset);
        }
        String who = (char) ((mark >>> 40) & 0xFF) + " round " + ((mark >>> 24) & 0xFFFF) + " block "
                + (mark & 0xFF_FFFF);
        return cellOffset == offset ? who : who + " (shifted by " + (offset - cellOffset) + " bytes)";
    }
}
