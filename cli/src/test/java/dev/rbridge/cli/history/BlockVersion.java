package dev.rbridge.cli.history;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.zip.CRC32C;

/**
 * One version of a block that the history workload writes: the writer's id and its sequence number, unique per
 * writer. Together they name the value, so a read says exactly which write it saw.
 *
 * <p>The block's bytes ({@link #encode}) carry a 40-byte header and a body derived from it:
 * <pre>
 *   0  magic "RBHIST01"        8  writer (int)      12  block length (int)
 *  16  sequence (long)        24  block index (long)
 *  32  CRC-32C of the whole block with these 4 bytes zero     36  zero (int)
 *  40  body: 64-bit words mixed from (writer, sequence, block index, word index)
 * </pre>
 * so a torn block (two versions' halves), a block written to the wrong place, a block of zeros where data was, or any
 * other garbage decodes ({@link #decode}) as {@link Content.Corrupt} or as a version naming another block, never as a
 * valid version of this one. All zero bytes decode as {@link Content.Initial}: never written.
 *
 * @param writer   the writer's id (each workload thread has its own)
 * @param sequence the writer's sequence number, increasing with every write it issues
 */
public record BlockVersion(int writer, long sequence) {
    /** The smallest block this format fills; any multiple of it works. */
    public static final int MIN_BLOCK_BYTES = 4096;
    static final int HEADER_BYTES = 40;
    private static final long MAGIC = 0x5242484953543031L; // "RBHIST01"
    private static final int CHECKSUM_AT = 32;

    @Override
    public String toString() {
        return "w" + writer + ":" + sequence;
    }

    /** What a block's bytes say: never written, one version (of some block), or garbage. */
    public sealed interface Content {
        /** All zeros: the block as a new volume has it. */
        record Initial() implements Content {
            @Override
            public String toString() {
                return "initial zeros";
            }
        }

        /** A valid {@code version} written for block {@code block} (compare it with where it was read). */
        record Written(BlockVersion version, long block) implements Content {
            @Override
            public String toString() {
                return version + " (of block " + block + ")";
            }
        }

        /** Neither: {@code offset} is the first byte within the block that gives it away. */
        record Corrupt(int offset, String why) implements Content {
            @Override
            public String toString() {
                return "corrupt at byte " + offset + " of the block: " + why;
            }
        }
    }

    public static final Content INITIAL = new Content.Initial();

    /** The bytes of this version of block {@code block}, {@code length} bytes long (a multiple of 4096). */
    public byte[] encode(long block, int length) {
        checkLength(length);
        byte[] out = new byte[length];
        ByteBuffer b = ByteBuffer.wrap(out);
        b.putLong(MAGIC).putInt(writer).putInt(length).putLong(sequence).putLong(block);
        for (int at = HEADER_BYTES; at < length; at += 8) {
            b.putLong(at, word(writer, sequence, block, at));
        }
        CRC32C crc = new CRC32C();
        crc.update(out);
        b.putInt(CHECKSUM_AT, (int) crc.getValue());
        return out;
    }

    /** What {@code data} (a block's bytes, a multiple of 4096 long) holds; never throws on any content. */
    public static Content decode(byte[] data) {
        checkLength(data.length);
        int nonZero = firstNonZero(data);
        if (nonZero < 0) {
            return INITIAL;
        }
        ByteBuffer b = ByteBuffer.wrap(data);
        if (b.getLong(0) != MAGIC) {
            return new Content.Corrupt(nonZero < 8 ? 0 : nonZero, "no version header (first non-zero byte at "
                    + nonZero + ")");
        }
        int writer = b.getInt(8);
        int length = b.getInt(12);
        long sequence = b.getLong(16);
        long block = b.getLong(24);
        if (length != data.length) {
            return new Content.Corrupt(12, "header says " + length + " bytes, read " + data.length);
        }
        byte[] expected = new BlockVersion(writer, sequence).encode(block, length);
        int differs = Arrays.mismatch(expected, data);
        if (differs >= 0) {
            return new Content.Corrupt(differs, "not the bytes of w" + writer + ":" + sequence + " of block " + block
                    + " (torn, overwritten in part, or a damaged header)");
        }
        return new Content.Written(new BlockVersion(writer, sequence), block);
    }

    private static void checkLength(int length) {
        if (length < MIN_BLOCK_BYTES || length % MIN_BLOCK_BYTES != 0) {
            throw new IllegalArgumentException("a block is a multiple of " + MIN_BLOCK_BYTES + " bytes, not "
                    + length);
        }
    }

    /** The body word at byte {@code at}: a SplitMix64-style mix, so neighbouring versions share no word. */
    private static long word(int writer, long sequence, long block, int at) {
        long z = sequence * 0x9E3779B97F4A7C15L + ((long) writer << 32) + block * 0xC2B2AE3D27D4EB4FL + at;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    private static int firstNonZero(byte[] data) {
        for (int i = 0; i < data.length; i++) {
            if (data[i] != 0) {
                return i;
            }
        }
        return -1;
    }
}
