package dev.rbridge.nbd.tls;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Pre-shared keys from a file in the format GnuTLS's psktool writes, and nbdkit ({@code --tls-psk}) and qemu
 * ({@code keys.psk}) read: one {@code identity:hexkey} per line. Checked line by line at start; a key is never logged.
 */
public final class PskKeys {
    /** Identities longer than this are refused (TLS allows 65535; nobody needs a kilobyte). */
    static final int MAX_IDENTITY = 1024;
    /** Keys shorter than 128 bits are refused: psktool makes 256-bit ones. */
    static final int MIN_KEY_BYTES = 16;
    static final int MAX_KEY_BYTES = 1024;

    private final Map<String, byte[]> keys;
    private final Path file;

    private PskKeys(Path file, Map<String, byte[]> keys) {
        this.file = file;
        this.keys = keys;
    }

    /** Reads and checks {@code file}; IllegalArgumentException naming the file and line when it is wrong. */
    public static PskKeys read(Path file) {
        List<String> lines;
        try {
            lines = Files.readAllLines(file, StandardCharsets.UTF_8);
        } catch (NoSuchFileException e) {
            throw new IllegalArgumentException(file + " not found (a PSK file: identity:hexkey lines, as `psktool -u "
                    + "NAME -p FILE` writes)");
        } catch (IOException e) {
            throw new IllegalArgumentException("cannot read " + file + ": " + e.getMessage(), e);
        }
        Map<String, byte[]> keys = new LinkedHashMap<>();
        for (int i = 0; i < lines.size(); i++) {
            String line = lines.get(i).strip();
            if (line.isEmpty()) {
                continue;
            }
            String where = file + " line " + (i + 1);
            int colon = line.lastIndexOf(':');
            if (colon <= 0) {
                throw new IllegalArgumentException(where + ": expected identity:hexkey");
            }
            String identity = line.substring(0, colon);
            if (identity.getBytes(StandardCharsets.UTF_8).length > MAX_IDENTITY) {
                throw new IllegalArgumentException(where + ": the identity is longer than " + MAX_IDENTITY + " bytes");
            }
            byte[] key;
            try {
                key = HexFormat.of().parseHex(line.substring(colon + 1));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(where + ": the key of '" + identity + "' is not hexadecimal");
            }
            if (key.length < MIN_KEY_BYTES || key.length > MAX_KEY_BYTES) {
                throw new IllegalArgumentException(where + ": the key of '" + identity + "' has " + key.length
                        + " bytes; between " + MIN_KEY_BYTES + " and " + MAX_KEY_BYTES + " are accepted");
            }
            if (keys.putIfAbsent(identity, key) != null) {
                throw new IllegalArgumentException(where + ": identity '" + identity + "' appears twice");
            }
        }
        if (keys.isEmpty()) {
            throw new IllegalArgumentException(file + " holds no key (identity:hexkey lines)");
        }
        return new PskKeys(file, Map.copyOf(keys));
    }

    /** The key of {@code identity}, or null. */
    byte[] key(String identity) {
        byte[] k = keys.get(identity);
        return k == null ? null : k.clone();
    }

    int size() {
        return keys.size();
    }

    /** Where the keys came from. */
    public Path file() {
        return file;
    }

    /** Other users can read the file: worth a warning, as for an ssh key. */
    public boolean readableByOthers() {
        try {
            Set<PosixFilePermission> p = Files.getPosixFilePermissions(file);
            return p.contains(PosixFilePermission.OTHERS_READ) || p.contains(PosixFilePermission.GROUP_READ);
        } catch (IOException | UnsupportedOperationException e) {
            return false;
        }
    }
}
